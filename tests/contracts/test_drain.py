"""A rollout's drain (workbench/contracts/drain.py): one computation of the completion curve and the
time at each running batch for a trace and a simulation, and a known tail reproduced through the
simulator."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from sim.simulator import simulate
from workbench.contracts.drain import (
    batch_time,
    completion_curve,
    curve_gap,
    drain_from_timeline,
    drain_from_turns,
    gap_to_points,
)
from workbench.contracts.length_data import from_frame, write_observed
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.workload import load_workload
from workbench.validate.tail_trace import measured_drain, simulated_drain


def test_a_trace_and_a_simulation_of_the_same_rollout_drain_alike():
    """The simulator's agentic turns written as a trace records them (each turn's engine latency,
    the tool call's after it) read back through the trace's path give the very drain the
    simulator's own turns give: the same completion curve and the same time at each batch."""
    wl = replace(load_workload("agentic-64x5"), steps=1)
    run = simulate(wl, load_policy("baseline"), load_profile(wl.profile), seed=0)
    t = run.turns.sort_values(["group", "member", "turn"]).reset_index(drop=True)
    nxt = t.groupby(["group", "member"])["arrive_s"].shift(-1)
    trace = t.assign(engine_s=t["end_s"] - t["arrive_s"],
                     tool_s=(nxt - t["end_s"]).fillna(0.0))
    # the trace's clock starts with its rollout; the simulator's at its own zero
    trace["engine_s"] = trace["engine_s"].where(trace["turn"] > 0,
                                                trace["end_s"] - t["arrive_s"].min())
    real, sim = measured_drain(trace, wl.workers), simulated_drain(t, wl.workers)
    assert real.responses == sim.responses == wl.sequences_per_step
    assert curve_gap(real, sim) < 1e-9
    grid = np.linspace(0, 1, 51)
    np.testing.assert_allclose(completion_curve(real, grid), completion_curve(sim, grid))
    a, b = batch_time(real), batch_time(sim)
    np.testing.assert_array_equal(a.batch, b.batch)
    np.testing.assert_allclose(a.share, b.share, atol=1e-9)


def _known_workload(tmp_path, lengths: list[int]):
    """One engine, one group of the given lengths, replayed."""
    df = pd.DataFrame({"batch": 0, "group": 0, "rank": -1, "prompt_tokens": 8,
                       "length": lengths, "correct": -1, "mixed": -1})
    write_observed(tmp_path / "known.lengths.parquet", from_frame(df))
    wl = load_workload("cpu-tiny")
    return replace(wl, workers=1, prompts_per_step=1, group_size=len(lengths), steps=1,
                   max_response_tokens=1024, max_batch=64, prompt_tokens=8,
                   lengths=replace(wl.lengths, kind="replay",
                                   data=str(tmp_path / "known.lengths.parquet")))


def test_a_known_tail_is_reproduced(tmp_path):
    """Six responses of 100 tokens, one of 400, one of 1,000, on an engine whose step costs the
    same at any batch: the drain is known in closed form. 75% are done at a tenth of the rollout,
    87.5% at 40%; the engine spends 10% of the rollout at batch 8, 30% at batch 2 and the last
    60% at batch 1 (the last response alone)."""
    wl = _known_workload(tmp_path, [100] * 6 + [400, 1000])
    prof = load_profile("cpu-tiny")
    flat = replace(prof.decode, overhead_s=0.01, per_seq_s=0.0, weights_s=0.0,
                   compute_s_per_token=0.0, kv_s_per_token=0.0, prefill_s_per_token=0.0)
    run = simulate(wl, load_policy("baseline"), replace(prof, decode=flat), seed=0)
    d = drain_from_timeline(run.timeline[run.timeline["rl_step"] == 0], 1, responses=8)
    assert d.rollout_s == pytest.approx(10.0, rel=1e-6)  # 1,000 steps of 10 ms
    np.testing.assert_allclose(completion_curve(d, [0.05, 0.1, 0.39, 0.4, 0.99, 1.0]),
                               [0.0, 0.75, 0.75, 0.875, 0.875, 1.0])
    bt = batch_time(d)
    assert dict(zip(bt.batch.tolist(), np.round(bt.share, 6).tolist())) == {
        0: 0.0, 1: 0.6, 2: 0.3, 8: 0.1}
    assert bt.at_most(2) == pytest.approx(0.9)
    assert gap_to_points(d, [0.1, 0.4], [0.75, 0.875]) == pytest.approx(0.0, abs=1e-12)


def test_a_rollout_that_admits_as_others_finish_is_refused(tmp_path):
    """With fewer slots than responses the running batch refills: its drops no longer count
    finishes, and the drain says so instead of miscounting."""
    wl = replace(_known_workload(tmp_path, [100] * 6 + [400, 1000]), max_batch=4)
    run = simulate(wl, load_policy("baseline"), load_profile("cpu-tiny"), seed=0)
    with pytest.raises(ValueError, match="not a closed rollout"):
        drain_from_timeline(run.timeline[run.timeline["rl_step"] == 0], 1, responses=8)


def test_turns_on_an_engine_count_as_running_and_tools_do_not():
    """Two trajectories on one engine: A's turn 0-2 s, tool, turn 3-4 s; B's turn 0-1 s. Running:
    2 for 1 s, 1 for 1 s, 0 while A is on its tool (1 s), 1 for 1 s; B done at 1 s, A at 4 s."""
    d = drain_from_turns(np.array([0, 0, 0]), np.array([0, 0, 1]), np.array([0.0, 3.0, 0.0]),
                         np.array([2.0, 4.0, 1.0]), 1)
    assert sorted(d.finish_s.tolist()) == [1.0, 4.0]
    bt = batch_time(d)
    assert dict(zip(bt.batch.tolist(), bt.share.tolist())) == {0: 0.25, 1: 0.5, 2: 0.25}
    np.testing.assert_allclose(completion_curve(d, [0.2, 0.25, 0.99, 1.0]), [0, 0.5, 0.5, 1.0])
