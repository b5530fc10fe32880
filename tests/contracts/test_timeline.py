"""The timeline's one vocabulary and one computation (workbench/contracts/timeline.py), and traces
of the previous version (1) read under this version's names.

`data/trace-v1/` is a version-1 trace with a timeline, written by the workbench before version 2:
three workers whose engine steps are the first 80, 60 and 40 of the held-out reference captures
(heldout-eagle, -none, -ngram), the first worker to finish spot-training until 30 ms past the
rollout's end (real/run/records.py's rows). The figures pinned below were computed by the code
before `rollout_split` replaced its three copies (sim/results.py, workbench/validate/waste.py,
real/run/records.py): the same inputs must give them still.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import fields
from pathlib import Path

import pandas as pd
import pytest

from real.rollout.requests import EngineStepRow
from real.run.records import StepTimes, WorkerRollout, WorkerSpot, step_record, step_timeline
from sim.simulator import simulate
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.timeline import rollout_split
from workbench.contracts.trace import (
    OLD_COLUMNS,
    REQUEST_COLUMNS,
    STEP_COLUMNS,
    TIMELINE_COLUMNS,
    TRACE_VERSION,
    RequestRow,
    TimelineRow,
    TraceError,
    load_trace,
    rows_frame,
    write_trace,
)
from workbench.contracts.workload import load_workload
from workbench.validate.waste import timeline_waste

V1 = Path(__file__).parent / "data" / "trace-v1"
REFERENCE = Path(__file__).parents[2] / "traces" / "reference"
REL = 1e-9
CLOCK0 = 1000.0  # the fixture's run began here (epoch seconds)

# (workers, rollout_s, bubble_fraction, tail_fraction, tail_token_share, full_batch, tail_batch) of
# the fixture's timeline, as workbench/validate/waste.py computed them before.
V1_WASTE = (3, 0.7159850759987876, 0.21718466005178236, 0.002129867950457856,
            0.0006289308176100629, 16, 2)
# StepRecord's bubble_frac and spot_frac for the fixture's rollouts, as real/run/records.py computed
# them before.
V1_RECORD = (0.248327208095805, 0.19767542492762818)
# Per policy and RL step: bubble_fraction, drafter_train_fraction, tail_fraction, tail_token_share
# of `simulate(cpu-tiny, policy, seed=2, steps=2)`, as sim/results.py computed them before.
SIMULATED = {
    "baseline": [(0.05582406566835912, 0.0, 0.20437002945674654, 0.060731203692457186),
                 (0.01314118071389173, 0.0, 0.3080882475917022, 0.09584602737076262)],
    "tlt": [(0.0, 0.0742215114232193, 0.1369225105187504, 0.060731203692457186),
            (0.03676169178385183, 0.0, 0.20791848324817128, 0.09584602737076262)],
}


def test_a_version_1_trace_reads_under_this_versions_names():
    t = load_trace(V1)
    assert t.meta["trace_version"] == 1 and TRACE_VERSION == 2
    assert list(t.steps.columns) == list(STEP_COLUMNS)
    assert list(t.requests.columns) == list(REQUEST_COLUMNS)
    assert list(t.timeline.columns) == list(TIMELINE_COLUMNS)
    # Engine steps count from 0 per worker; the three workers ran 80, 60 and 40 of them.
    per_worker = t.steps.groupby("worker")["engine_step"].agg(["min", "max", "size"])
    assert per_worker.to_dict("index") == {0: {"min": 0, "max": 79, "size": 80},
                                           1: {"min": 0, "max": 59, "size": 60},
                                          2: {"min": 0, "max": 39, "size": 40}}
    assert sorted(t.requests["worker"].unique()) == [0, 1, 2]
    assert set(t.timeline["rl_step"]) == {0} and set(t.timeline["worker"]) == {0, 1, 2}


def test_a_version_1_timelines_waste_is_as_before():
    (w,) = timeline_waste(load_trace(V1).timeline)
    s = w.split
    assert w.rl_step == 0
    assert (s.workers, s.full_batch, s.tail_batch) == (V1_WASTE[0], *V1_WASTE[5:])
    assert [s.rollout_s, s.bubble_fraction, s.tail_fraction, s.tail_token_share] == \
        pytest.approx(list(V1_WASTE[1:5]), rel=REL)


def _fixture_rollouts(t) -> tuple[dict[int, WorkerRollout], list[WorkerSpot], StepTimes]:
    """The rollouts the fixture was recorded from: each worker's rollout from 4 ms before its first
    engine step to 2 ms after its last; the first to finish spot-trains from 50 ms after until 30 ms
    past the end."""
    extra = [f.name for f in fields(EngineStepRow) if f.name not in STEP_COLUMNS]
    rollouts = {}
    for w, rows in t.steps.groupby("worker"):
        defaults = {k: getattr(EngineStepRow, k) for k in extra}
        steps = [EngineStepRow(**r, **defaults) for r in rows.to_dict("records")]
        start = CLOCK0 + steps[0].start_s - 0.004
        end = CLOCK0 + steps[-1].start_s + steps[-1].wall_s + 0.002
        rollouts[int(w)] = WorkerRollout(int(w), start, end, steps, [], {}, drafts=1, accepted=1)
    first = min(rollouts, key=lambda w: rollouts[w].end)
    end = max(r.end for r in rollouts.values())
    spots = [WorkerSpot(first, rollouts[first].end + 0.05, end + 0.03, steps=5, loss=0.1, top1=0.5,
                        stopped=True, stop_latency_s=0.03)]
    return rollouts, spots, StepTimes(CLOCK0, end, end, end + 1.0, end + 1.5)


def test_a_real_runs_record_is_as_before_and_its_timeline_adds_the_wait():
    t = load_trace(V1)
    rollouts, spots, times = _fixture_rollouts(t)
    requests = [t.requests.iloc[0]]
    grpo = type("Stats", (), {"loss": 0.0, "kl": 0.0})()
    rec = step_record(0, rollouts, spots, requests, times, grpo, "eagle", clock0=CLOCK0)
    assert 0.0 < rec.tail_fraction < 0.01
    # The timeline is the one recorded before, plus each worker's wait for its rollout to begin
    # (idle from the step's start): idle time the record's bubble once counted, now its own share
    # (no worker has finished its share then: `wait_fraction`, not the bubble).
    now = rows_frame(step_timeline(0, rollouts, spots, times, CLOCK0), TimelineRow)
    waiting = (now["state"] == "idle") & (now["start_s"].abs() < 1e-9)
    assert waiting.sum() == 3
    before = t.timeline.drop(columns="state").reset_index(drop=True)
    assert now[~waiting].drop(columns="state").reset_index(drop=True).equals(before)
    # The record's figures are rollout_split's over that timeline, cut to the step's start and the
    # rollout's end (worker 0's spot training ran 30 ms past it).
    split = rollout_split(now, 3, window=(times.start - CLOCK0, times.rollout_end - CLOCK0))
    assert (split.bubble_fraction, split.drafter_train_fraction, split.tail_fraction) == \
        (rec.bubble_fraction, rec.drafter_train_fraction, rec.tail_fraction)
    got = [rec.bubble_fraction + split.wait_fraction, rec.drafter_train_fraction]
    assert got == pytest.approx(list(V1_RECORD), rel=REL)
    assert split.wait_fraction > 0.0


@pytest.mark.parametrize("policy", sorted(SIMULATED))
def test_simulated_figures_are_as_before(policy):
    wl = load_workload("cpu-tiny")
    run = simulate(wl, load_policy(policy), load_profile(wl.profile), seed=2, steps=2)
    got = [(m.bubble_fraction, m.drafter_train_fraction, m.tail_fraction, m.tail_token_share)
           for m in run.steps]
    for g, want in zip(got, SIMULATED[policy], strict=True):
        assert list(g) == pytest.approx(list(want), rel=REL, abs=1e-15)
    # The waste tool reads the same figures off the simulator's timeline.
    for w, m in zip(timeline_waste(run.timeline), run.steps, strict=True):
        assert (w.rl_step, w.split.bubble_fraction, w.split.tail_fraction) == \
            (m.rl_step, pytest.approx(m.bubble_fraction, rel=REL),
             pytest.approx(m.tail_fraction, rel=REL))


def test_rewriting_an_old_trace_writes_this_version(tmp_path):
    t = load_trace(V1)
    write_trace(t, tmp_path / "t")
    assert json.loads((tmp_path / "t" / "meta.json").read_text())["trace_version"] == TRACE_VERSION
    again = load_trace(tmp_path / "t")
    assert again.meta["trace_version"] == TRACE_VERSION
    plain = [c for c in t.steps.columns if c != "accepted_per_pos"]  # lists compare element-wise
    pd.testing.assert_frame_equal(again.steps[plain], t.steps[plain])
    pd.testing.assert_frame_equal(again.timeline.astype({"state": str}),
                                  t.timeline.astype({"state": str}))


@pytest.mark.parametrize("name", [f"{s}-{k}" for s in ("fit", "heldout")
                                  for k in ("none", "ngram", "eagle")])
def test_the_shipped_reference_traces_are_version_1_and_load(name):
    t = load_trace(REFERENCE / name)
    assert t.meta["trace_version"] == 1
    assert set(t.steps["worker"]) == {0}
    assert list(t.steps["engine_step"]) == list(range(len(t.steps)))
    assert "engine" not in t.steps.columns and "step" not in t.steps.columns


def test_an_unknown_version_is_refused_naming_those_read(tmp_path):
    shutil.copytree(V1, tmp_path / "t")
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    (tmp_path / "t" / "meta.json").write_text(json.dumps({**meta, "trace_version": 7}))
    with pytest.raises(TraceError, match=r"trace_version.*is 7.*reads versions 1, 2"):
        load_trace(tmp_path / "t")


def test_a_version_1_table_missing_a_column_names_it(tmp_path):
    shutil.copytree(V1, tmp_path / "t")
    steps = pd.read_parquet(tmp_path / "t" / "steps.parquet").drop(columns="engine")
    steps.to_parquet(tmp_path / "t" / "steps.parquet", index=False)
    with pytest.raises(TraceError,
                       match=r"steps.parquet: column 'engine': missing; a trace v1 table has it "
                                         r"\(v2 calls it 'worker'"):
        load_trace(tmp_path / "t")
    assert OLD_COLUMNS[1]["steps"]["engine"] == "worker"


def test_rows_pickled_under_version_1_names_load_under_this_versions():
    """A `tlt train` checkpoint keeps the trace's rows pickled (rows.pt); one from a run begun
    before version 2 holds them under version 1's field names, and resuming it must read them."""
    import pickle

    from real.run.records import RunRows

    t = load_trace(V1)
    rows = RunRows()
    rows.steps = [EngineStepRow(**r) for r in t.steps.head(2).to_dict("records")]
    rows.requests = [RequestRow(**r) for r in t.requests.head(2).to_dict("records")]
    first_two = t.timeline.astype({"state": str}).head(2).to_dict("records")
    rows.timeline = [TimelineRow(**r) for r in first_two]
    for row in rows.steps + rows.requests + rows.timeline:  # as version 1's classes pickled them
        for table in ("steps", "requests", "timeline"):
            if row._table == table:
                for old, new in OLD_COLUMNS[1][table].items():
                    row.__dict__[old] = row.__dict__.pop(new)
    assert "engine" in rows.steps[0].__dict__ and "step" in rows.timeline[0].__dict__
    back = pickle.loads(pickle.dumps(rows))
    assert [(r.worker, r.engine_step) for r in back.steps] == [(0, 0), (0, 1)]
    assert "engine" not in back.steps[0].__dict__ and math.isnan(back.steps[0].exec_s)
    assert [r.worker for r in back.requests] == [0, 0]
    assert [r.rl_step for r in back.timeline] == [0, 0]
    trace = back.frames(t.meta)
    assert list(trace.steps.columns) == list(STEP_COLUMNS)
    assert list(trace.timeline.columns) == list(TIMELINE_COLUMNS)


def test_a_trace_without_per_request_speculation_loads_and_one_with_it_round_trips(tmp_path):
    """RequestRow.spec_* are optional: a trace written before them (or by an engine without SD)
    reads them as "not recorded"; a capture's values survive a write and a read."""
    t = load_trace(REFERENCE / "heldout-eagle")
    written = pd.read_parquet(REFERENCE / "heldout-eagle" / "requests.parquet")
    assert "spec_passes_by_len" not in written.columns
    assert all(list(v) == [] for v in t.requests["spec_passes_by_len"])
    assert t.requests["spec_accepted"].isna().all()
    t.requests["spec_passes_by_len"] = [[0, 0, 3, 5]] * len(t.requests)
    t.requests["spec_accepted"] = 7.0
    write_trace(t, tmp_path / "t")
    back = load_trace(tmp_path / "t")
    passes = [list(v) for v in back.requests["spec_passes_by_len"]]
    assert passes == [[0, 0, 3, 5]] * len(t.requests)
    assert (back.requests["spec_accepted"] == 7.0).all()
