"""Suffix drafts' sibling share: the per-engine cache must give what a fresh count over the
active sequences gives, at every segment, in rollouts and in streaming."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sim.rollout import SiblingShare
from sim.simulator import simulate
from workbench.contracts.policy import BanditConfig, load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.workload import load_workload


def fresh_share(groups) -> float:
    """The share counted from the groups' arrays, as the simulator first computed it."""
    if not groups:
        return 0.0
    shares = [float(np.sum(g.generated >= g.lengths)) / (len(g.lengths) - 1) for g in groups]
    return round(float(np.mean(shares)), 1)


@pytest.mark.parametrize("rollout", ["history-sd", "verl-fully-async"])
def test_cached_sibling_share_matches_a_fresh_count(monkeypatch, rollout):
    seen: list[float] = []
    cached = SiblingShare.at

    def checked(self, engine):
        value = cached(self, engine)
        assert value == fresh_share([self.group_of(i) for i in engine.active()])
        seen.append(value)
        return value

    monkeypatch.setattr(SiblingShare, "at", checked)
    # A bandit's short decision interval ends most segments before any response finishes.
    policy = replace(load_policy("history-sd"), rollout=load_policy(rollout).rollout,
                     bandit=BanditConfig(algorithm="ucb1", arms=(0, 2, 4), decision_interval=8))
    wl = load_workload("cpu-tiny")
    simulate(wl, policy, load_profile(wl.profile), seed=1, steps=2)
    assert len(set(seen)) > 2  # the share moved as siblings finished
