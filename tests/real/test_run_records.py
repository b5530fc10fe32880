"""What `tlt train` records per RL step (real/run/records.py) and what it refuses before starting
(real/run/coordinator.py's RunConfig): no Ray, vLLM or torch needed."""

from __future__ import annotations

import math
import pickle

import pytest

from real.rollout.requests import EngineStepRow, Sample
from real.run.coordinator import RunConfig, TrainError
from real.run.records import (
    METRIC_COLUMNS,
    RunRows,
    StepTimes,
    WorkerRollout,
    WorkerSpot,
    add_step_rows,
    metrics_frame,
    step_record,
)
from workbench.contracts.policy import load_policy
from workbench.contracts.trace import RequestRow, load_trace, write_trace

CLOCK0 = 1000.0  # the run began here (epoch seconds)


def _step(
    step: int, start_s: float, wall_s: float, draft_len: int, drafts: int, accepted: int
) -> EngineStepRow:
    return EngineStepRow(
        rl_step=0,
        worker=0,
        engine_step=step,
        start_s=start_s,
        wall_s=wall_s,
        batch_size=2,
        num_waiting=0,
        prefill_requests=0,
        prefill_tokens=0,
        decode_requests=2,
        scheduled_tokens=2 + drafts * draft_len,
        context_mean=20.0,
        context_max=24,
        draft_len=draft_len,
        num_drafts=drafts,
        num_draft_tokens=drafts * draft_len,
        num_accepted_tokens=accepted,
        accepted_per_pos=[accepted] + [0] * (draft_len - 1) if draft_len else [],
        new_tokens=2 + accepted,
        exec_s=0.001,
        finished=0,
        chosen_k=draft_len,
    )


def _request(worker: int, prompt: int, sample: int, tokens: int, reward: float) -> RequestRow:
    return RequestRow(
        rl_step=0,
        worker=worker,
        request_id=f"p{prompt}-s{sample}",
        prompt_id=prompt,
        sample=sample,
        prompt_tokens=10,
        response_tokens=tokens,
        finish_reason="stop",
        start_s=0.0,
        end_s=1.0,
        reward=reward,
    )


@pytest.fixture
def step_zero():
    """Two workers: worker 0 decodes from 0 to 4 s with SD, worker 1 from 0 to 2 s without and
    then spot-trains from 2.5 to 4.2 s; the update ends at 5 s, the sync at 6 s (run time)."""
    w0 = WorkerRollout(
        0,
        CLOCK0,
        CLOCK0 + 4.0,
        [_step(0, 0.0, 2.0, 0, 0, 0), _step(1, 2.0, 2.0, 3, 2, 4)],
        [_request(0, 0, 0, 30, 1.0), _request(0, 0, 1, 50, 0.0)],
        {"p0-s0": Sample([5] * 30, "A: 1", "stop"), "p0-s1": Sample([6] * 50, "A: 2", "stop")},
        {"p0-s0": [1, 2], "p0-s1": [1, 2]},
        drafts=2,
        accepted=4,
    )
    w1 = WorkerRollout(1, CLOCK0, CLOCK0 + 2.0, [_step(0, 0.0, 2.0, 0, 0, 0)],
                       [_request(1, 1, 0, 10, 0.0), _request(1, 1, 1, 12, 0.0)], {}, {})
    spot = WorkerSpot(
        1, CLOCK0 + 2.5, CLOCK0 + 4.2, steps=7, loss=0.5, top1=0.4, stopped=True, stop_latency_s=0.2
    )
    times = StepTimes(
        start=CLOCK0,
        rollout_end=CLOCK0 + 4.0,
        train_start=CLOCK0 + 4.0,
        train_end=CLOCK0 + 5.0,
        sync_end=CLOCK0 + 6.0,
    )
    return {0: w0, 1: w1}, [spot], times


def test_a_worker_rollout_gives_its_sequences():
    w = WorkerRollout(
        0, 0.0, 1.0, [], [], {"p0-s0": Sample([7, 8], "x", "stop")}, {"p0-s0": [1, 2, 3]}
    )
    assert w.sequence("p0-s0") == [1, 2, 3, 7, 8]


def test_step_record_and_rows(step_zero, tmp_path):
    rollouts, spots, times = step_zero
    requests = [r for w in rollouts.values() for r in w.requests]
    grpo = type("Stats", (), {"loss": 0.25, "kl": 0.0})()
    rec = step_record(0, rollouts, spots, requests, times, grpo, "eagle", clock0=CLOCK0)
    assert (rec.step_s, rec.rollout_s, rec.train_s, rec.sync_s) == (6.0, 4.0, 1.0, 1.0)
    assert rec.mean_accept_len == 3.0  # 1 + 4 accepted / 2 drafts
    assert rec.reward == 0.25 and rec.pass_at_g == 0.5  # prompt 0 has a right sample, prompt 1 none
    # Worker-time over 2 workers x 4 s: decoding 4 + 2 s, spot training 1.5 s (cut at the rollout's
    # end).
    assert rec.drafter_train_fraction == pytest.approx(
        1.5 / 8
    ) and rec.bubble_fraction == pytest.approx(1 - 7.5 / 8)
    assert rec.tail_fraction == 0.0  # every decode step ran the full batch (2)
    assert (rec.drafter_steps, rec.drafter_loss, rec.stop_latency_s) == (7, 0.5, 0.2)
    assert (rec.tokens, rec.longest, rec.grpo_loss, rec.drafter_kind) == (102, 50, 0.25, "eagle")
    assert list(metrics_frame([rec]).columns) == list(METRIC_COLUMNS)

    rows = RunRows()
    add_step_rows(rows, 0, rollouts, spots, requests, times, CLOCK0)
    states = [(r.worker, r.state, round(r.start_s, 6), round(r.end_s, 6)) for r in rows.timeline]
    assert states == [
        (0, "decode", 0.0, 2.0),
        (0, "decode_sd", 2.0, 4.0),
        (0, "train", 4.0, 5.0),
        (0, "sync", 5.0, 6.0),
        (1, "decode", 0.0, 2.0),
        (1, "idle", 2.0, 2.5),
        (1, "drafter_train", 2.5, 4.2),
        (1, "train", 4.0, 5.0),
        (1, "sync", 5.0, 6.0),
    ]  # worker 1 trained past the rollout's end
    assert [r.drafter_train_s for r in rows.rl_steps] == [pytest.approx(1.5)]
    rows = pickle.loads(pickle.dumps(rows))  # checkpoints keep the rows (torch.save pickles them)
    meta = {
        "model": "m",
        "policy": {"name": "tlt"},
        "prompts": 2,
        "samples": 2,
        "max_tokens": 64,
        "seed": 0,
        "machine": {},
        "engine": {},
    }
    write_trace(rows.frames(meta), tmp_path / "trace")
    t = load_trace(tmp_path / "trace")
    assert (
        len(t.steps) == 3
        and "exec_s" not in t.steps.columns
        and t.steps["draft_len"].tolist() == [0, 3, 0]
    )
    assert t.steps["accepted_per_pos"].map(list).tolist() == [[], [4, 0, 0], []]
    assert len(t.requests) == 4 and t.timeline["state"].tolist() == [s for _, s, _, _ in states]
    assert math.isclose(t.rl_steps["rollout_s"][0], 4.0)


def test_a_record_under_its_former_names_loads(step_zero):
    """A checkpoint (or metrics.csv) written before the fields were renamed, and before
    tail_fraction: resuming it reads the old names as the new ones."""
    from dataclasses import asdict

    from real.run.records import OLD_METRIC_NAMES, StepRecord

    rollouts, spots, times = step_zero
    requests = [r for w in rollouts.values() for r in w.requests]
    rec = step_record(
        0,
        rollouts,
        spots,
        requests,
        times,
        type("S", (), {"loss": 0.0, "kl": 0.0})(),
        "eagle",
        clock0=CLOCK0,
    )
    old = {
        next((o for o, n in OLD_METRIC_NAMES.items() if n == k), k): v
        for k, v in asdict(rec).items()
        if k != "tail_fraction"
    }
    assert {"bubble_frac", "spot_frac"} <= set(old) and "bubble_fraction" not in old
    back = StepRecord.from_dict(old)
    assert (back.bubble_fraction, back.drafter_train_fraction) == (
        rec.bubble_fraction,
        rec.drafter_train_fraction,
    )
    assert math.isnan(back.tail_fraction) and StepRecord.from_dict(asdict(rec)) == rec


@pytest.mark.needs_reference
def test_run_config_refuses_a_negative_seed(reference_model, tmp_path):
    cfg = RunConfig(
        model=reference_model, policy=load_policy("baseline"), out=tmp_path / "run", seed=-1
    )
    with pytest.raises(TrainError, match="--seed -1"):
        cfg.check()


def test_the_drafter_switch_rule_goes_both_ways_by_the_margin():
    """The drafter not running takes over once it beats the running one by the relative margin;
    within the margin (either way) nothing moves, so the engines do not flip back and forth."""
    from real.run.engine_plan import choose_drafter
    from real.run.records import DrafterCheck

    m = 0.05
    assert choose_drafter("ngram", DrafterCheck(eagle=2.2, ngram=2.0), m) == "eagle"
    # within the margin
    assert choose_drafter("ngram", DrafterCheck(eagle=2.05, ngram=2.0), m) == "ngram"
    assert choose_drafter("eagle", DrafterCheck(eagle=2.05, ngram=2.0), m) == "eagle"
    # within the margin
    assert choose_drafter("eagle", DrafterCheck(eagle=2.0, ngram=2.05), m) == "eagle"
    assert choose_drafter("eagle", DrafterCheck(eagle=1.8, ngram=2.0), m) == "ngram"
    # a tie keeps the running one
    assert choose_drafter("eagle", DrafterCheck(eagle=2.0, ngram=2.0), 0.0) == "eagle"
    nan = math.nan
    assert choose_drafter("ngram", DrafterCheck(eagle=nan, ngram=2.0), m) == "ngram"
    assert choose_drafter("eagle", DrafterCheck(eagle=nan, ngram=2.0), m) == "eagle"


def test_the_idle_workers_checks_are_averaged_and_a_stopped_one_counts_for_nothing():
    from real.run.records import DrafterCheck, WorkerSpot

    def spot(worker, check):
        return WorkerSpot(worker, 0.0, 1.0, 3, 0.5, 0.4, True, 0.1, check=check)

    def mean(spots):
        return DrafterCheck.mean(sp.check for sp in spots)

    assert mean([]) is None and mean([spot(0, None)]) is None
    got = mean(
        [spot(0, DrafterCheck(4.0, 1.5, 3.0)), spot(1, None), spot(2, DrafterCheck(5.0, 2.5, 4.0))]
    )
    assert (got.eagle, got.ngram, got.static) == (4.5, 2.0, 3.5)
    assert (got.estimate("eagle"), got.estimate("ngram")) == (4.5, 2.0) and math.isnan(
        got.estimate("none")
    )
    # A cold run checks no static drafter: its NaN stays NaN, the switch rule reads eagle and n-gram
    # only.
    cold = mean([spot(0, DrafterCheck(2.0, 1.2))])
    assert math.isnan(cold.static) and (cold.eagle, cold.ngram) == (2.0, 1.2)


def test_the_engines_next_drafter_follows_the_switch_rule_and_the_sd_guard():
    """next_engines: the n-gram <-> EAGLE rule, SD off where the verdict loses (returning to the
    drafter the rule picks), back when estimates predict a win, and never EAGLE without a
    drafter."""
    from real.run.engine_plan import EngineChoice, SDOff, next_engines
    from real.run.records import DrafterCheck
    from real.run.sd_pricing import SDVerdict

    kw = dict(switches=True, margin=0.1, has_drafter=True)
    wins, loses = SDVerdict(1.0, 1.5, 10), SDVerdict(1.0, 0.5, 10)
    eagle_better = DrafterCheck(eagle=3.0, ngram=1.0)
    assert next_engines("ngram", None, eagle_better, wins, **kw) == EngineChoice("eagle", None)
    assert (
        next_engines("ngram", None, eagle_better, wins, **{**kw, "has_drafter": False}).kind
        == "ngram"
    )
    assert (
        next_engines("ngram", None, eagle_better, None, **{**kw, "switches": False}).kind == "ngram"
    )
    off = next_engines("ngram", None, eagle_better, loses, **kw)
    # returns to what the rule picked, by its estimate
    assert off == EngineChoice("none", SDOff("eagle", 0.5, 3.0))
    improved = DrafterCheck(eagle=9.0, ngram=1.0)
    still = next_engines("none", off.sd_off, improved, None, **kw)
    assert still.kind == "none" and still.sd_off.recent == (9.0,)  # one estimate is not enough
    back = next_engines("none", still.sd_off, improved, None, **kw)  # 0.5 x 9 / 3: predicts 1.5x
    assert back == EngineChoice("eagle", None)
    # a policy without SD
    assert next_engines("none", None, eagle_better, None, **kw) == EngineChoice("none", None)


def test_one_engine_plan_says_what_every_engine_runs_and_keeps_the_policy_as_written():
    """EnginePlan: a cold learned drafter with n-gram fallback starts behind n-gram; the engine's
    policy runs the state's drafter, the user's policy is never rewritten; the start table is the
    running drafter's; `next` applies the switch rule and the SD guard; a checkpoint round-trips."""
    import json

    from real.run.engine_plan import EnginePlan, SDOff
    from real.run.records import DrafterCheck
    from real.run.sd_pricing import SDVerdict

    cold = load_policy("tlt-cold")
    tables = {"ngram": (2, 2, 1, 1, 0), "eagle": (4, 4, 2, 2, 0)}
    st = EnginePlan.initial(cold, tables)
    assert st.kind == "ngram" and st.switches and st.guarded and st.sd_off is None
    assert (
        st.engine_policy().drafter.kind == "ngram"
        and st.policy is cold
        and cold.drafter.kind == "eagle"
    )
    assert st.engine_policy().schedule == cold.schedule and st.start_table() == (2, 2, 1, 1, 0)
    # warm-started: on the engines at once
    assert EnginePlan.initial(load_policy("tlt-vllm")).kind == "eagle"
    eagle = st.next(DrafterCheck(eagle=3.0, ngram=1.0), SDVerdict(1.0, 1.5, 10), has_drafter=True)
    assert eagle.kind == "eagle" and eagle.start_table() == (4, 4, 2, 2, 0) and st.kind == "ngram"
    off = eagle.next(DrafterCheck(eagle=3.0, ngram=1.0), SDVerdict(1.0, 0.5, 10), has_drafter=True)
    assert off.kind == "none" and off.sd_off == SDOff("eagle", 0.5, 3.0)
    off = off.next(DrafterCheck(eagle=3.2, ngram=1.0), None, has_drafter=True)
    saved = json.loads(json.dumps(off.state_dict()))
    back = EnginePlan.initial(cold, tables).load_state_dict(saved)
    assert back == off and back.sd_off.recent == (3.2,)
    assert st.after_probe(SDVerdict(1.0, 1.5, 10)) is st  # the probe's SD wins: the plan stands
    probed = st.after_probe(SDVerdict(1.0, 0.5, 10))  # loses: no drafter from step 0, no estimate
    assert probed.kind == "none" and probed.sd_off.kind == "ngram"
    assert math.isnan(probed.sd_off.estimate)
