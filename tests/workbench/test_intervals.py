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
from workbench.compare.intervals import (interval_lines, policy_intervals, priced_profile,
                                        run_work)
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.uncertainty import (ACCEPT_ERROR_PCT, CostPoint, CostSplit,
                                             CostUncertainty)
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
    # A profile that declares nothing of its costs: the lengths' sampling alone, over 2 steps...
    bare = replace(prof, uncertainty=None, fit_error_pct=None)
    alone = policy_intervals(works, bare)
    assert "no cost error" in alone[0].covers and "2 simulated steps" in alone[0].covers
    # ...and no interval over one step, saying why.
    one = [(name, [replace(w, **{f: getattr(w, f)[:1] for f in ARRAYS}) for w in per])
           for name, per in works]
    assert policy_intervals(one, bare) is None
    assert interval_lines(None, "baseline")[0].startswith("no interval: the profile declares")


ARRAYS = ("kernel_s", "passes", "host_s", "rest_s", "train_s", "sd_kernel_s", "sd_passes",
          "sd_host_s")


def test_a_measured_database_profile_declares_its_fit_error_and_acceptance():
    """What-if on arrival: no run log, yet each speedup has an interval from the profile's fit
    error, the acceptance's declared error and the lengths' sampling; a higher acceptance makes an
    SD run faster and leaves a plain one as it is."""
    wl = replace(load_workload("fastrl-example-7b-8gpu"), steps=3)
    prof = load_profile(wl.profile)
    assert prof.uncertainty is None and prof.fit_error_pct
    runs = {name: simulate(wl, load_policy(name), prof, seed=0, steps=3)
            for name in ("baseline", "tlt")}
    works = {name: run_work(r, prof, wl.workers) for name, r in runs.items()}
    own = prof.cost_point
    assert np.allclose(works["baseline"].step_s(own, own, 1.1), works["baseline"].step_s(own, own))
    assert np.all(works["tlt"].step_s(own, own, 1.1) < works["tlt"].step_s(own, own))
    base, tlt = policy_intervals([(n, [w]) for n, w in works.items()], prof)
    assert tlt.speedup.low < tlt.speedup.center < tlt.speedup.high
    assert base.step_s.low < base.step_s.center < base.step_s.high
    assert f"{prof.fit_error_pct:g}% median |error|" in tlt.covers
    assert f"{ACCEPT_ERROR_PCT:g}% median |error|" in tlt.covers
    assert "3 simulated steps" in tlt.covers


def test_the_declared_acceptance_error_is_the_acceptance_models_on_published_lengths():
    """ACCEPT_ERROR_PCT is measured: the shipped GPU profiles' acceptance against the TLT paper's
    published accepted lengths (every GPU preset shares that model)."""
    from sim.acceptance import stats_for
    from workbench.calibrate.published.database_check import accepted_length_rows
    from workbench.calibrate.published.microbenchmarks import load_published
    from workbench.contracts.policy import DrafterKind

    rows = accepted_length_rows(load_published())
    assert len(rows) == 8
    acc = load_profile("h100-qwen2.5-32b-tp8-sglang").acceptance
    errors = [100 * (stats_for(acc, DrafterKind.EAGLE, 1.0, r.strategy).mean / r.value - 1)
              for r in rows]
    assert float(np.median(np.abs(errors))) == pytest.approx(ACCEPT_ERROR_PCT, abs=0.01)


def test_a_multi_round_step_is_priced_round_by_round():
    """DAPO's dynamic sampling generates in rounds, each waiting for its slowest engine: the
    priced step is each round's slowest engine, one after the other (exactly the simulation's)."""
    wl = load_workload("polytrace-dapo-qwen2.5-32b")
    prof = load_profile(wl.profile)
    run = simulate(wl, load_policy("baseline"), prof, seed=0, steps=2)
    work = run_work(run, prof, wl.workers)
    assert work.priced and work.kernel_s.shape[1] > 1  # more than one round
    np.testing.assert_allclose(work.step_s(prof.cost_point, prof.cost_point),
                               [m.step_time_s for m in run.steps], rtol=1e-9)
