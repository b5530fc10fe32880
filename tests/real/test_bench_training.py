"""real/experiments/bench_training.py's report, from hand-made trace tables and step records (no
vLLM, no Ray): where the baseline's decoding time goes per batch bucket, how fast each run decodes
there, the rollout's share of the step, and the response-length shape."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from real.experiments.bench_training import (
    TrainingBench,
    bucket_rows,
    length_shape,
    paired_median,
    paper_policy,
    phase_times,
    summarize,
)
from real.run.records import StepRecord


def _steps(rows) -> pd.DataFrame:
    """Engine steps of (batch, decode requests, new tokens, wall seconds, draft length,
    prefills)."""
    return pd.DataFrame(
        [
            dict(
                batch_size=b,
                decode_requests=d,
                new_tokens=n,
                wall_s=w,
                draft_len=k,
                prefill_requests=p,
            )
            for b, d, n, w, k, p in rows
        ]
    )


def test_bucket_rows_compare_tokens_per_sequence_per_second_and_leave_prefill_out():
    base = _steps([(1, 1, 1, 0.01, 0, 0), (1, 1, 1, 0.01, 0, 0), (6, 6, 6, 0.02, 0, 0),
                   (8, 0, 40, 0.5, 0, 8)])  # a prefill step: no decoding to compare
    tlt = _steps(
        [
            (1, 1, 3, 0.012, 4, 0),
            (1, 1, 1, 0.010, 4, 0),
            (6, 6, 6, 0.02, 0, 0),
            (6, 6, 12, 0.03, 2, 0),
        ]
    )
    rows = {r.bucket: r for r in bucket_rows(base, tlt)}
    assert set(rows) == {"1", "5-8"}
    one = rows["1"]
    # the prefill step's 0.5 s is no decoding
    assert one.baseline_time_share == pytest.approx(0.02 / 0.04)
    assert one.baseline_rate == pytest.approx(2 / 0.02) and one.tlt_rate == pytest.approx(4 / 0.022)
    assert one.speedup == pytest.approx(one.tlt_rate / one.baseline_rate)
    assert one.tlt_draft_lens == "K4:100%"
    assert (
        rows["5-8"].tlt_rate == pytest.approx(3 / 0.05)
        and rows["5-8"].tlt_draft_lens == "K0:50% K2:50%"
    )


def test_the_fastest_draft_length_per_bucket_and_the_whole_decode_speedup():
    from real.experiments.bench_training import MIN_ARM_STEPS, decode_speedup

    # 100 tok/seq/s at both
    base = _steps([(1, 1, 1, 0.01, 0, 0)] * 10 + [(8, 8, 8, 0.01, 0, 0)] * 30)
    n = MIN_ARM_STEPS
    tlt = _steps([(1, 1, 2, 0.01, 1, 0)] * n + [(1, 1, 4, 0.01, 3, 0)] * n  # K1 2x, K3 4x
                 + [(1, 1, 9, 0.01, 8, 0)] * (n - 1)  # faster still, but too few steps to count
                 + [(8, 8, 16, 0.01, 2, 0)] * n)  # K2 2x
    rows = {r.bucket: r for r in bucket_rows(base, tlt)}
    assert (rows["1"].best_draft_len, rows["1"].best_speedup) == (3, pytest.approx(4.0))
    assert (rows["5-8"].best_draft_len, rows["5-8"].best_speedup) == (2, pytest.approx(2.0))
    # the baseline spent a quarter of its decode at batch 1: weighted by that time, not by steps
    one = rows["1"].speedup
    assert decode_speedup(list(rows.values())) == pytest.approx(1 / (0.25 / one + 0.75 / 2.0))
    assert decode_speedup(list(rows.values()), best=True) == pytest.approx(
        1 / (0.25 / 4.0 + 0.75 / 2.0)
    )


def test_a_bucket_only_one_run_reached_has_no_speedup():
    rows = bucket_rows(_steps([(2, 2, 2, 0.01, 0, 0)]), _steps([(3, 3, 3, 0.01, 2, 0)]))
    by = {r.bucket: r for r in rows}
    assert (
        math.isnan(by["2"].tlt_rate)
        and math.isnan(by["3-4"].baseline_rate)
        and math.isnan(by["3-4"].speedup)
    )


def test_length_shape_counts_responses_cut_at_the_cap():
    req = pd.DataFrame(
        {
            "response_tokens": [10, 20, 30, 40, 100, 100],
            "finish_reason": ["stop"] * 4 + ["length"] * 2,
        }
    )
    shape = length_shape(req, max_tokens=100)
    assert (shape.p50, shape.max, shape.clip_ratio) == (35.0, 100, pytest.approx(2 / 6))
    assert shape.p90 == pytest.approx(100.0)


def _record(step_s: float, rollout_s: float, train_s: float, sync_s: float) -> StepRecord:
    fields = {f: math.nan for f in StepRecord.__dataclass_fields__}
    fields.update(rl_step=0, step_s=step_s, rollout_s=rollout_s, train_s=train_s, sync_s=sync_s)
    return StepRecord(**fields)


def test_phase_times_are_means_per_step_and_the_rollout_share_their_ratio():
    p = phase_times([_record(10.0, 8.0, 1.5, 0.5), _record(20.0, 16.0, 3.0, 1.0)])
    assert (p.step_s, p.rollout_s, p.train_s, p.sync_s) == (15.0, 12.0, 2.25, 0.75)
    assert p.rollout_share == pytest.approx(0.8)


def test_the_paired_median_speedup_ignores_one_outlier_step():
    """Step 2 of the TLT run hit a busy machine (40 s): the ratio of means says TLT lost; the median
    of the per-step ratios says what the other steps agree on."""
    base, tlt = [10.0, 12.0, 11.0, 9.0, 10.0], [5.0, 6.0, 40.0, 4.5, 5.0]
    assert sum(base) / sum(tlt) < 1.0
    assert paired_median(base, tlt) == pytest.approx(2.0)
    assert math.isnan(paired_median([], []))


def _run(step_s, rollout_s, reward, accept) -> list[StepRecord]:
    recs = []
    for st, ro in zip(step_s, rollout_s):
        r = _record(st, ro, (st - ro) * 0.75, (st - ro) * 0.25)
        r.reward, r.mean_accept_len = reward, accept
        recs.append(r)
    return recs


def _three_runs() -> dict[str, list[StepRecord]]:
    """baseline, n-gram and TLT over three paired steps; the n-gram run is named before TLT."""
    return {"baseline": _run([10.0, 12.0, 11.0], [8.0, 10.0, 9.0], 0.5, 1.0),
            "ngram-sd": _run([9.0, 11.0, 10.0], [7.0, 9.0, 8.0], 0.5, 1.8),
            "tlt-vllm": _run([8.0, 8.0, 22.0], [6.0, 6.0, 20.0], 0.6, 3.5)}


def test_the_paper_configuration_is_the_first_tlt_named_policy_else_the_second():
    assert paper_policy(["baseline", "ngram-sd", "tlt-vllm", "tlt"]) == "tlt-vllm"
    assert paper_policy(["baseline", "tuned", "tlt-cold"]) == "tlt-cold"
    assert paper_policy(["baseline", "tuned", "other"]) == "tuned"
    with pytest.raises(ValueError, match="at least one policy"):
        paper_policy(["baseline"])


def test_n_policies_are_each_compared_with_the_reference_and_the_summary_keeps_the_paper_policy():
    paper, results, summary = summarize(_three_runs())
    assert paper == "tlt-vllm" and list(results) == ["baseline", "ngram-sd", "tlt-vllm"]
    ref = results["baseline"]
    assert (ref.speedup_step, ref.speedup_rollout, ref.speedup_step_median) == (1.0, 1.0, 1.0)
    ng = results["ngram-sd"]
    assert ng.speedup_step == pytest.approx(33 / 30) and ng.speedup_rollout == pytest.approx(
        27 / 24
    )
    assert ng.speedup_step_median == pytest.approx(11 / 10) and ng.mean_accept_len == 1.8
    tlt = results["tlt-vllm"]
    # An outlier third step: the ratio of means says TLT lost, the paired median that it won.
    assert tlt.speedup_step == pytest.approx(33 / 38) and tlt.speedup_step < 1
    assert tlt.speedup_step_median == pytest.approx(1.25)
    assert tlt.rollout_share == pytest.approx(32 / 38) and tlt.reward == pytest.approx(0.6)
    # The original summary keys describe the paper's configuration (not simply the second run).
    assert (
        summary.speedup_step == tlt.speedup_step
        and summary.speedup_rollout_median == tlt.speedup_rollout_median
    )
    assert (summary.reward_baseline, summary.reward_tlt, summary.mean_accept_len) == (
        0.5,
        pytest.approx(0.6),
        3.5,
    )
    assert summary.rollout_share_baseline == ref.rollout_share


def test_the_bench_json_adds_every_policy_and_the_prediction_beside_the_original_keys():
    from workbench.cli.train import bench_json
    from workbench.validate.bench_prediction import BenchPrediction, PolicyPrediction

    steps = _three_runs()
    paper, results, summary = summarize(steps)
    report = TrainingBench(
        summary, steps, reference="baseline", paper_policy=paper, policies=results
    )
    rows = [
        PolicyPrediction(
            n,
            r.step_s,
            r.step_s * 0.9,
            r.speedup_step,
            pred,
            err,
            r.rollout_s,
            r.rollout_s,
            r.speedup_rollout,
            r.speedup_rollout,
            0.0,
            False,
        )
        for (n, r), pred, err in zip(results.items(), (1.0, 1.2, 1.1), (0.0, 9.1, math.nan))
    ]
    data = bench_json(report, BenchPrediction("cpu-tiny", "baseline", rows, []))
    assert list(data)[:9] == [
        "speedup_step",
        "speedup_rollout",
        "mean_accept_len",
        "reward_baseline",
        "reward_tlt",
        "rollout_share_baseline",
        "rollout_share_tlt",
        "speedup_step_median",
        "speedup_rollout_median",
    ]
    assert data["paper_policy"] == "tlt-vllm" and data["speedup_step"] == round(33 / 38, 4)
    # NaN -> null
    assert data["predicted_speedup_step"] == 1.1 and data["prediction_error_pct"] is None
    assert set(data["policies"]) == {"baseline", "ngram-sd", "tlt-vllm"}
    ng = data["policies"]["ngram-sd"]
    assert ng["speedup_step"] == round(33 / 30, 4) and ng["predicted_speedup_step"] == 1.2
    assert ng["prediction_error_pct"] == 9.1 and "step_s" in ng and "rollout_share" in ng
    assert "predicted_speedup_step" not in bench_json(report, None)


def test_spot_interference_compares_like_steps_only():
    """Steps beside another worker's spot training are the tail's (deep contexts, long drafts): each
    is compared with steps alone at its batch, draft length and context, never with the whole
    bucket."""
    from real.experiments.bench_training import matched_slowdown
    from workbench.contracts.timeline import Timeline

    tl, t = Timeline(), 0.0
    # worker 0 alone: shallow K=2, deep K=8
    for ms, k, ctx in [(10, 2, 300)] * 5 + [(20, 8, 1050)] * 5:
        tl.add(0, 0, t, t + ms / 1e3, "decode_sd", batch=1, draft_len=k, context=ctx)
        t += ms / 1e3
    tl.add(0, 1, t, t + 1.0, "drafter_train", tokens=3)  # worker 1 trains the drafter
    for ms in (22, 23, 24):  # worker 0's deep K=8 steps beside it: 1.1-1.2x the like steps alone
        tl.add(0, 0, t, t + ms / 1e3, "decode_sd", batch=1, draft_len=8, context=1100)
        t += ms / 1e3
    tl.add(0, 0, t, t + 0.03, "decode_sd", batch=1, draft_len=6, context=1100)  # no like step alone
    g = matched_slowdown(tl.frame())
    row = g.loc["1"]
    assert row["beside_training"] == 4 and row["matched"] == 3
    # the bucket's median alone (15 ms) would say 1.53x
    assert row["slowdown"] == pytest.approx(23 / 20)
