"""The agentic check against a trace, the traced engine's fit, and `tlt compare` on an agentic
workload (the split around the tool calls, the tool-latency sweep)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from sim.simulator import simulate
from sim.trajectories import model_group
from workbench.cli import app
from workbench.cli.common import cluster_profile
from workbench.compare.agentic import agentic_why
from workbench.compare.policies import compare
from workbench.compare.tool_sweep import tool_latency_sweep
from workbench.contracts.agentic import AgenticModel
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.turn_data import from_frame, read_turns, write_turns
from workbench.contracts.workload import load_workload
from workbench.contracts.schema import ConfigError, load, save
from workbench.contracts.trace_fit import STATUS_WORDS, STATUSES
from workbench.validate.agentic_engine import fit_engine
from workbench.validate.engine_factors import FIT_FACTORS, drawn_engines, with_factors
from workbench.validate.agentic_trace import check, summary

PRESET = "polytrace-search-r1-qwen2.5-7b"
runner = CliRunner()


def drawn_groups(n: int, size: int, seed: int) -> list:
    """`n` groups drawn from the default model, as (prompt, [(completion, tool tokens, tool s)])."""
    rng = np.random.default_rng(seed)
    m = AgenticModel(enabled=True)
    out = []
    for _ in range(n):
        out.append([(300, [(int(c), int(tk), float(ts)) for c, tk, ts in
                           zip(t.completion, t.tool_tokens, t.tool_s)])
                    for t in model_group(m, size, 1 << 30, rng).trajectories])
    return out


def traced_by(wl, truth, tmp_path):
    """`wl` replaying the turns the simulator makes on `truth`, written into its turns table as the
    measured engine latencies (a synthetic trace made by a known engine)."""
    made = simulate(wl, load_policy("baseline"), truth, seed=0).turns
    t = read_turns(wl.agentic.data).frame()
    lat = made.assign(engine_s=made["end_s"] - made["arrive_s"])
    t = t.drop(columns="engine_s").merge(lat[["batch", "group", "member", "turn", "engine_s"]],
                                         on=["batch", "group", "member", "turn"])
    write_turns(tmp_path / "measured.parquet", from_frame(t))
    return replace(wl, agentic=replace(wl.agentic, data=str(tmp_path / "measured.parquet")))


def test_the_engine_fit_finds_the_per_sequence_cost_that_made_the_trace(agentic_workload,
                                                                         simple_profile,
                                                                         tmp_path):
    """A trace made by the simulator with per_seq_s 4 ms: its turns' latencies, written into
    the turns table as measured, are explained by that cost (the fit starts elsewhere)."""
    wl = traced_by(agentic_workload(drawn_groups(16, 4, seed=5)),
                   simple_profile(step_s=0.004, prefill_s=2e-4), tmp_path)
    fit = fit_engine(wl, simple_profile(step_s=0.0, prefill_s=2e-4), [0],
                     ("per_seq_s", "prefill_factor"))
    assert fit.value("per_seq_s") == pytest.approx(0.004, rel=0.03)
    assert fit.value("prefill_factor") == pytest.approx(1.0, abs=0.2)
    assert fit.fit.factor("per_seq_s").se > 0 and fit.fit.moments_rms < 0.01
    checks, _ = check(wl, with_factors(simple_profile(0.0, 2e-4), fit.values()), [0])
    assert abs(checks[0].makespan_error) < 0.02


def test_the_engine_fit_recovers_a_known_context_slope(agentic_workload, simple_profile,
                                                       tmp_path):
    """A trace made by an engine whose decode step costs 2 ms per sequence plus 1.5 us per
    sequence per context token (twice the H100 probe's slope, its prior's mean): the fit of both
    from the turns' latencies finds them, away from the prior, and says the trace pins them."""
    truth = simple_profile(step_s=0.002, prefill_s=2e-4)
    truth = replace(truth, decode=replace(truth.decode, kv_s_per_token=1.5e-6))
    wl = traced_by(agentic_workload(drawn_groups(16, 4, seed=5)), truth, tmp_path)
    fit = fit_engine(wl, simple_profile(step_s=0.0, prefill_s=2e-4), [0],
                     ("per_seq_s", "kv_s_per_token"))
    assert fit.value("kv_s_per_token") == pytest.approx(1.5e-6, rel=0.1)
    assert fit.value("per_seq_s") == pytest.approx(0.002, rel=0.1)
    kv = fit.fit.factor("kv_s_per_token")
    assert kv.status == "identified" and 0 < kv.se < 0.5 * kv.value
    assert "torch_native_probe-h100.txt" in kv.prior


def test_a_context_slope_the_trace_does_not_need_is_not_identified(agentic_workload,
                                                                  simple_profile, tmp_path):
    """The same trace made with no context slope: the fit cannot tell one from none, and says its
    prior (the probe's) sets it."""
    wl = traced_by(agentic_workload(drawn_groups(16, 4, seed=5)),
                   simple_profile(step_s=0.002, prefill_s=2e-4), tmp_path)
    fit = fit_engine(wl, simple_profile(step_s=0.0, prefill_s=2e-4), [0],
                     ("per_seq_s", "kv_s_per_token"))
    assert fit.fit.factor("kv_s_per_token").status in ("prior", "edge")


def test_the_shipped_trace_held_out_step_is_predicted_within_the_goals():
    """The workload's profile was fitted on step 0; step 1 is a prediction: its median turn
    latency within 25% of the trace and its makespan within 15% (docs/results.md)."""
    wl = load_workload(PRESET)
    checks, by_turn = check(wl, load_profile(wl.profile), [1])
    s = summary(checks)
    assert abs(s["median_turn_latency_error"]) < 0.25
    assert abs(s["makespan_error"]) < 0.15
    assert list(by_turn.index) == [0, 1, 2, 3, 4]
    # what the prefix cache kept matches what SGLang's radix cache kept, within a few percent
    c = checks[0]
    assert c.prefill_simulated == pytest.approx(c.prefill_measured, rel=0.05)


def small_search_r1(steps: int = 1):
    wl = load_workload(PRESET)
    return replace(wl, prompts_per_step=16, steps=steps)


def test_compare_reports_the_tool_split_for_an_agentic_workload_only():
    wl = small_search_r1()
    prof = load_profile(wl.profile)
    pols = [load_policy(p) for p in ("baseline", "tlt")]
    c = compare(wl, pols, prof, 1)
    d = c.to_dict()
    assert set(d["agentic"]) == {"baseline", "tlt"}
    base = d["agentic"]["baseline"]
    assert 0 < base["tool_share"] < 1 and base["turn_latency_s"] > 0
    single = compare(load_workload("cpu-tiny"), pols, load_profile("cpu-tiny"), 1)
    assert "agentic" not in single.to_dict()


def test_the_tool_sweep_moves_only_the_tools():
    wl = small_search_r1()
    pols = [load_policy(p) for p in ("baseline", "static-sd")]
    sw = tool_latency_sweep(wl, pols, load_profile(wl.profile), [0.0, 1.0, 100.0])
    shares = [p.tool_share for p in sw.points]
    assert shares[0] == 0 and shares[0] < shares[1] < shares[2]
    steps = [p.step_s["baseline"] for p in sw.points]
    assert steps[0] <= steps[1] < steps[2]
    assert all(p.speedup["baseline"] == 1.0 for p in sw.points)
    run = simulate(replace(wl, agentic=replace(wl.agentic, tool_latency_scale=0.0)),
                   pols[0], load_profile(wl.profile), seed=0)
    assert agentic_why(run).tool_wait_share == 0


def test_the_cli_refuses_a_tool_sweep_on_a_single_turn_workload(tmp_path):
    res = runner.invoke(app, ["compare", "--workload", "cpu-tiny", "--policies",
                              "baseline,tlt", "--seeds", "1", "--tool-latency", "0.1,1",
                              "--out", str(tmp_path / "c")])
    assert res.exit_code == 2 and "agentic.enabled" in res.output
    assert not (tmp_path / "c").exists()


def test_workload_check_prints_each_step_and_a_json_line(tmp_path):
    res = runner.invoke(app, ["workload", "check", PRESET, "--steps", "2", "--out",
                              str(tmp_path)])
    assert res.exit_code == 0, res.output
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert last["held_out_steps"] == [2]
    saved = json.loads((tmp_path / "check.json").read_text())
    assert saved["per_step"][0]["step"] == 2
    bad = runner.invoke(app, ["workload", "check", "cpu-tiny"])
    assert bad.exit_code == 2 and "agentic.data" in bad.output
    bad = runner.invoke(app, ["workload", "check", PRESET, "--fit-steps", "0",
                              "--fit-factors", "per_seq_s,speed"])
    assert bad.exit_code == 2 and "--fit-factors" in bad.output and "kv_s_per_token" in bad.output


def test_the_traced_engine_with_a_declared_per_sequence_cost_predicts_without_a_fit():
    """Nothing fitted: the H100's measured costs carried to the H20, and the per-sequence cost the
    GPU probe measured (traces/published/polytrace-search-r1/torch_native_probe-h100.txt)."""
    res = runner.invoke(app, ["workload", "check", PRESET, "--steps", "1", "--per-seq-s",
                              "0.003175"])
    assert res.exit_code == 0, res.output
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert last["held_out_steps"] == [1]
    assert abs(last["median_turn_latency_error"]) < 0.25 and abs(last["makespan_error"]) < 0.15
    none = runner.invoke(app, ["workload", "check", PRESET, "--steps", "1", "--per-seq-s", "0"])
    assert json.loads(none.stdout.strip().splitlines()[-1])["median_turn_latency_error"] < -0.5


def test_the_shipped_engine_names_each_factor_its_status_and_prior():
    """The Search-R1 engine's profile records every factor its fit set: its value (the one the
    profile's costs hold), standard error, declared range, status and, for the step's fixed cost and
    the context slope, the prior with its source."""
    prof = load_profile(load_workload(PRESET).profile)
    fit = prof.trace_fit
    assert fit is not None and fit.fit_steps == (0,)
    assert tuple(f.name for f in fit.factors) == FIT_FACTORS
    for f in fit.factors:
        assert f.status in STATUSES and f.low <= f.value <= f.high and f.se > 0
        assert f"{f.name} " in prof.description and STATUS_WORDS[f.status] in prof.description
    d = prof.decode
    assert d.per_seq_s == fit.factor("per_seq_s").value
    assert d.overhead_s == fit.factor("overhead_s").value
    assert d.kv_s_per_token == fit.factor("kv_s_per_token").value
    assert "vllm-omni/issues/7960" in fit.factor("overhead_s").prior
    assert "torch_native_probe-h100.txt" in fit.factor("kv_s_per_token").prior
    assert fit.factor("per_seq_s").prior == ""  # flat over its range


def test_a_trace_fit_round_trips_and_a_bad_status_is_refused(tmp_path):
    prof = load_profile(load_workload(PRESET).profile)
    save(prof, tmp_path / "p.yaml")
    assert load(type(prof), tmp_path / "p.yaml", tmp_path).trace_fit == prof.trace_fit
    text = (tmp_path / "p.yaml").read_text().replace("status: identified", "status: pinned", 1)
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"trace_fit\.factors\[\d\]\.status"):
        load_profile(tmp_path / "bad.yaml")
    assert load_profile("cpu-tiny").trace_fit is None  # a profile written before: no fit


def test_engines_drawn_from_the_fit_stay_in_range_and_repeat_with_the_seed():
    prof = load_profile(load_workload(PRESET).profile)
    a, b = drawn_engines(prof, 4, seed=3), drawn_engines(prof, 4, seed=3)
    assert [x.decode for x in a] == [x.decode for x in b]
    assert len({x.decode.kv_s_per_token for x in a}) == 4
    kv = prof.trace_fit.factor("kv_s_per_token")
    assert all(kv.low <= x.decode.kv_s_per_token <= kv.high for x in a)
    assert drawn_engines(load_profile("cpu-tiny"), 4, seed=3) == []


def test_an_engine_derived_from_the_traced_one_does_not_claim_its_fit():
    """`--profile cluster:...` derives the H100's engine with the workload's profile as its base
    (acceptance, learning): the trace's fit is the H20 engine's, not the derived one's."""
    wl = load_workload(PRESET)
    derived = cluster_profile("cluster:qwen2.5-7b:h100:sglang", wl)
    assert load_profile(wl.profile).trace_fit is not None and derived.trace_fit is None
