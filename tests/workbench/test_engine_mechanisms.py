"""What an engine release does to a speculative pass (issue 50): the profile records its release and
prices its mechanisms; a CUDA-graph limit moves where SD stops paying, host work per draft step
makes long drafts slower at large batch, the curve's policy never runs SD where it loses, and the
tuner keeps SD out of every bucket the profile predicts it loses in, on every target."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from sim.costs import segment_s
from workbench import tune
from workbench.calibrate.database.engine_versions import CATALOG, load_catalog, repriced
from workbench.compare.sd_curve import Acceptance, candidate_table, sd_curve, speedup
from workbench.compare.sd_why import why_stops
from workbench.contracts.policy import DrafterKind, load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError, from_mapping, save, to_mapping
from workbench.contracts.strategy import Strategy
from workbench.contracts.workload import load_workload
from workbench.schedule import goodput, guard_policy
from workbench.tune.guard import guard_context
from workbench.tune import policy_of
from workbench.tune.space import refusal
from workbench.tune.targets import TARGETS

SGLANG = "h100-qwen2.5-7b-tp1-sglang"  # SGLang 0.5.14 (priced as 0.5.5) on one H100
CHAIN3, CHAIN7 = Strategy.chain(3), Strategy.chain(7)
EAGLE = DrafterKind.EAGLE


def _release(prof, version=None, graph_max=None):
    return replace(prof, mechanisms=repriced(prof.mechanisms, version, graph_max))


def test_a_profile_knows_its_engine_release_and_old_files_load_unchanged(tmp_path):
    prof = load_profile(SGLANG)
    m = prof.mechanisms
    assert (m.framework, m.version) == ("sglang", prof.cluster.framework_version)
    assert "engine-versions.yaml" in m.source and "0.5.5" in m.source
    save(prof, tmp_path / "p.yaml")
    assert load_profile(tmp_path / "p.yaml") == prof
    # A profile written before releases were priced has none, and costs exactly what it did.
    old = load_profile("h100-qwen2.5-7b-tp1")
    assert old.mechanisms is None and "mechanisms" not in to_mapping(old)
    assert segment_s(old.decode, old.drafter, EAGLE, 64, 2048, CHAIN3) == segment_s(
        old.decode, old.drafter, EAGLE, 64, 2048, CHAIN3, m=None)
    bad = to_mapping(prof)
    bad["mechanisms"]["verify_graph_max"] = -1
    with pytest.raises(ConfigError, match=r"mechanisms\.verify_graph_max"):
        from_mapping(type(prof), bad, "p.yaml")


def test_a_release_between_two_listed_ones_takes_the_older_ones_mechanisms(tmp_path):
    cat = load_catalog()
    rel, exact = cat.release_for("sglang", "0.5.2")
    assert (rel.version, exact) == ("0.4.9", False)
    assert cat.release_for("sglang", "0.4.4")[1]
    assert cat.release_for("vllm", "0.10.0")[0].version == "0.8.5"
    # SGLang 0.4.4 captures SD passes only to batch 32 (plain decoding to 160); vLLM keys on tokens
    r = cat.release_for("sglang", "0.4.4")[0]
    assert (r.verify_graph_max, r.plain_graph_max, r.graphs_by_tokens) == (32, 160, False)
    assert cat.release_for("vllm", "0.11.0")[0].graphs_by_tokens
    data = yaml.safe_load(CATALOG.read_text(encoding="utf-8"))
    del data["versions"][0]["verify_graph_max"]
    path = tmp_path / "engines.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"versions\[0\]\.verify_graph_max"):
        load_catalog(path)


def test_a_graph_capture_limit_moves_the_crossover():
    prof = load_profile(SGLANG)
    acc = Acceptance(tokens_per_pass=2.29)  # EAGLE-1 at a chain of 3
    new = sd_curve(prof, EAGLE, CHAIN3, acc, 512.0)
    old = sd_curve(_release(prof, "0.4.4"), EAGLE, CHAIN3, acc, 512.0)
    # SGLang 0.4.4 replays SD passes from graphs only up to batch 32: from 33 they run eager, and
    # a chain of 3 stops paying there; 0.5.5's graphs reach 256 and the chain pays further.
    assert old.strategy_crossover == 33 < new.strategy_crossover
    why = why_stops(_release(prof, "0.4.4"), EAGLE, 33, 512.0, CHAIN3, 2.29)
    assert why.mechanism == "graphs" and why.costs["graphs"] > 0
    assert why_stops(prof, EAGLE, 33, 512.0, CHAIN3, 2.29).costs["graphs"] == 0
    # A user's cap on every pass (--cuda-graph-max-bs) moves it too.
    capped = sd_curve(_release(prof, graph_max=8), EAGLE, CHAIN3, acc, 512.0)
    assert capped.strategy_crossover != new.strategy_crossover


def test_host_work_per_draft_step_makes_long_drafts_slower_at_large_batch():
    prof = load_profile(SGLANG)
    step = replace(prof, mechanisms=replace(prof.mechanisms, host_s_per_seq_step=3.65e-5))

    def ratio(p, b):  # a chain of 7 (3.54 tokens a pass) over a chain of 3 (2.79)
        return (speedup(p, EAGLE, b, 2048.0, CHAIN7, 3.54)
                / speedup(p, EAGLE, b, 2048.0, CHAIN3, 2.79))

    # The host's work grows with batch x draft length: a longer draft loses more of its lead the
    # larger the batch, and more than without that work.
    with_step = [ratio(step, b) for b in (1, 32, 128, 256)]
    assert with_step == sorted(with_step, reverse=True)
    assert all(ratio(step, b) < ratio(prof, b) for b in (32, 128, 256))
    assert ratio(step, 1) == pytest.approx(ratio(prof, 1), abs=0.01)
    assert ratio(step, 128) < 0.75 < ratio(prof, 128)


@pytest.mark.parametrize("name, version", [(SGLANG, None), (SGLANG, "0.4.4"),
                                           ("h100-qwen2.5-32b-tp8-sglang", None),
                                           ("h100-qwen3-30b-a3b-tp8-vllm", None)])
def test_the_curves_policy_never_runs_sd_where_its_curves_say_it_loses(name, version):
    prof = load_profile(name)
    prof = _release(prof, version) if version else prof
    for context in (512.0, 4096.0):
        c = sd_curve(prof, EAGLE, CHAIN3, Acceptance(), context)
        _, table = candidate_table(prof, EAGLE, Acceptance(), CHAIN3, context)
        assert c.policy.losing(table) == []
        assert {"1", "8"} <= set(table) and len(table["1"]) == 512  # chains 1-8, batch 1-512
        if c.crossover_batch is not None:
            assert c.sd_threshold == c.crossover_batch - 1
            assert max(row[c.crossover_batch - 1] for row in table.values()) < 1.0
            assert c.policy.why.mechanism in c.policy.why.costs
        assert all(b.strategy == "0" for b in c.buckets if b.min_batch > c.sd_threshold)


def _sd_loses(policy, prof, context):
    """(batch, strategy) pairs where the policy runs SD that `prof` predicts slower than plain: a
    fixed table's bucket strategy, or a bandit whose every arm loses there. Suffix drafts are left
    to the simulator: their acceptance depends on the rollout's history, which no batch-level
    prediction of the profile holds (docs/results.md)."""
    kind = policy.drafter.kind
    if not policy.uses_sd or kind not in (DrafterKind.EAGLE, DrafterKind.NGRAM):
        return []
    q = prof.acceptance.warm_start_quality if policy.drafter.warm_start else 1.0

    def loses(b, s):
        return (goodput(prof, kind, q, b, s, context)
                < goodput(prof, DrafterKind.NONE, 1.0, b, 0, context))

    if policy.bandit.algorithm != "fixed":
        arms = [k for k in policy.bandit.arms if k > 0]
        return [(b, "every arm") for b in range(1, policy.sd_threshold + 1)
                if all(loses(b, k) for k in arms)]
    return [(b, r.strategy.name) for r in policy.schedule if r.strategy.steps
            for b in range(r.min_batch, min(r.max_batch, policy.sd_threshold) + 1)
            if loses(b, r.strategy)]


def test_the_guard_turns_sd_off_in_a_losing_bucket_or_lowers_the_threshold():
    prof = load_profile("h100-qwen2.5-7b-tp4-sglang")
    tlt = load_policy("tlt")  # FastRL's trees up to batch 32: 8_4_8 loses on this 7B engine
    assert _sd_loses(tlt, prof, 512.0)
    rows_off = guard_policy(tlt, prof, 512.0, True)
    assert rows_off.changes and _sd_loses(rows_off.policy, prof, 512.0) == []
    by_threshold = guard_policy(tlt, prof, 512.0, False)
    assert by_threshold.policy.schedule == tlt.schedule
    assert by_threshold.policy.sd_threshold < tlt.sd_threshold
    assert _sd_loses(by_threshold.policy, prof, 512.0) == []
    # A policy that pays wherever it runs SD is left as it is.
    again = guard_policy(rows_off.policy, prof, 512.0, True)
    assert again.changes == () and again.policy == rows_off.policy


@pytest.mark.parametrize("target", TARGETS)
def test_a_tuned_policy_never_enables_sd_in_a_losing_bucket(target):
    wl = replace(load_workload("fastrl-example-7b-8gpu"), prompts_per_step=8, steps=1)
    prof = load_profile(wl.profile)
    spec = tune.TuneSpec(wl, prof, seeds=1, target=target, prune=False)
    study = tune.open_study(spec, f"guard-{target}", storage=None, sampler_seed=0)
    tune.run_study(study, spec, 8)
    policies = [policy_of(t, "p") for t in tune.complete_trials(study)]
    policies.append(tune.best_policy(study))
    for p in policies:
        assert _sd_loses(p, prof, guard_context(wl)) == [], (target, to_mapping(p))
    assert refusal(tune.best_policy(study), target) is None
