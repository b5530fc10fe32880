"""Every simulated speedup and time with its interval: a run priced again under a draw of its
profile's cost components gives what a simulation under those costs gives (exactly without SD,
within a few percent with it, where the bandit would choose a little differently), the draws stay
in their declared ranges, and `tlt sim` / `tlt compare` print the intervals."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from sim.simulator import simulate
from workbench.compare.cost_draws import draw_costs
from workbench.compare.intervals import policy_intervals, priced_profile, run_work
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.uncertainty import CostPoint, CostSplit, CostUncertainty
from workbench.contracts.workload import load_workload

COV = ((0.01, -0.005, 0.0, 0.0), (-0.005, 0.09, 0.0, 0.0), (0.0, 0.0, 0.09, 0.0),
       (0.0, 0.0, 0.0, 0.0004))


@pytest.fixture(scope="module")
def setup():
    wl = replace(load_workload("fastrl-example-7b-8gpu"), steps=2)
    prof = load_profile(wl.profile)
    prof = replace(prof, decode=replace(prof.decode, overhead_s=0.004),
                   phases=replace(prof.phases, weight_sync_s=3.0))
    u = CostUncertainty("test", (0.0, math.log(0.004), math.log(3.0), 0.0), COV,
                        (0.5, 1e-4, 0.5, 0.5), (2.0, 0.05, 30.0, 2.0), run_scatter=0.03,
                        splits=(CostSplit("all per engine step", 1.0, 0.02, 0.5),))
    return wl, replace(prof, uncertainty=u)


@pytest.mark.parametrize("policy,tolerance", [("baseline", 1e-9), ("tlt", 0.05)])
def test_a_run_priced_again_is_the_simulation_under_those_costs(setup, policy, tolerance):
    wl, prof = setup
    pol = load_policy(policy)
    run = simulate(wl, pol, prof, seed=0, steps=2)
    work = run_work(run, prof, wl.workers)
    own = prof.cost_point
    np.testing.assert_allclose(work.step_s(own, own), [m.step_time_s for m in run.steps],
                               rtol=1e-9)
    p = CostPoint(1.6, 0.012, 8.0, 1.1)
    again = simulate(wl, pol, priced_profile(prof, p), seed=0, steps=2)
    np.testing.assert_allclose(work.step_s(own, p), [m.step_time_s for m in again.steps],
                               rtol=tolerance)


def test_draws_are_seeded_and_stay_in_their_ranges(setup):
    u = setup[1].uncertainty
    a, b = draw_costs(u, 300, seed=4), draw_costs(u, 300, seed=4)
    assert a == b and a != draw_costs(u, 300, seed=5)
    x = np.array([d.as_array() for d in a])
    assert np.all(x >= np.array(u.lower) * (1 - 1e-9))
    assert np.all(x <= np.array(u.upper) * (1 + 1e-9))
    assert np.exp(np.mean(np.log(x[:, 1]))) == pytest.approx(0.004, rel=0.15)
    with_samples = replace(u, samples=((1.0, 0.004, 3.0, 1.0), (1.2, 0.005, 2.0, 1.0)))
    assert {d.kernel_scale for d in draw_costs(with_samples, 10)} == {1.0, 1.2}


def test_each_policy_gets_an_interval_around_its_own_answer(setup):
    wl, prof = setup
    runs = [(name, [simulate(wl, load_policy(name), prof, seed=0, steps=2)])
            for name in ("baseline", "tlt")]
    works = [(name, [run_work(r, prof, wl.workers) for r in per]) for name, per in runs]
    out = policy_intervals(works, prof)
    base, tlt = out
    assert base.speedup.center == pytest.approx(1.0) and base.speedup.low == pytest.approx(1.0)
    assert tlt.speedup.low <= tlt.speedup.center <= tlt.speedup.high
    assert tlt.step_s.low < tlt.step_s.center < tlt.step_s.high
    assert dict(tlt.splits)["all per engine step"] > 0
    assert "90%:" in tlt.speedup.text() and tlt.speedup.text().endswith("x")
    assert policy_intervals(works, replace(prof, uncertainty=None)) is None
