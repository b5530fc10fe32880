"""Other frameworks' run logs (slime/miles, NeMo-RL, SkyRL, OpenRLHF, AReaL, ROLL): each recognised
with its version's source, its timers mapped onto veRL's phases by its declared table, its shape
from its launch config, its semantics honoured, and a damaged log refused naming the file.

The logs are traces/published/framework-logs/: written from each framework's logging code (its
README says which file at which tag), with made-up numbers."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from workbench.cli import app
from workbench.contracts.schema import ConfigError
from workbench.runlog.command import parse_command
from workbench.runlog.frameworks import recognise
from workbench.runlog.lengths import model_lengths, step_stats
from workbench.runlog.reader import GEN, STEP, read_run_log
from workbench.runlog.shape import ShapeFlags, run_shape

# file -> (framework, timed steps, the first timed step, its rollout s, its step s or None: the sum
# of its phases, phases mapped, an unmapped timer or "", (engines, TP, prompts, n, cap, engine))
CASES = {
    "slime-qwen2.5-7b.log": ("slime", 7, 1, "perf/rollout_time", "perf/step_time",
                             {"old_log_prob", "ref", "update_actor", "update_weights"},
                             "perf/train_wait_time", (4, 2, 32, 8, 4096, "sglang")),
    "nemo-rl-qwen2.5-7b.log": ("NeMo-RL", 8, 1, "generation:", "Total step time:",
                               {"old_log_prob", "update_actor", "update_weights", "reward", "adv"},
                               "training_prep", (4, 2, 32, 16, 4096, "vllm")),
    "skyrl-qwen2.5-7b.log": ("SkyRL", 8, 1, "'timing/generate'", "'timing/step'",
                             {"old_log_prob", "adv", "update_actor", "update_weights"},
                             "timing/convert_to_training_input", (4, 2, 64, 8, 4096, "vllm")),
    "openrlhf-qwen2.5-7b.log": ("OpenRLHF", 8, 1, "'timing/generation'", "'timing/step_total'",
                                {"old_log_prob", "update_actor", "update_weights"}, "",
                                (4, 2, 64, 8, 4096, "vllm")),
    "areal-qwen2.5-7b.log": ("AReaL", 8, 1, "timeperf/rollout", None,
                             {"old_log_prob", "ref", "adv", "update_actor", "update_weights"},
                             "timeperf/clear_batches", (4, 2, 64, 8, 4096, "sglang")),
    "roll-qwen2.5-7b.log": ("ROLL", 7, 0, '"time/step_generate"', None,
                            {"old_log_prob", "ref", "update_actor", "update_weights"}, "",
                            (4, 2, 64, 8, 4096, "vllm")),
}


@pytest.fixture(scope="module")
def logs(repo_root):
    return repo_root / "traces" / "published" / "framework-logs"


def _value_after(text: str, marker: str) -> float:
    """The first number printed after `marker` in `text` (a fixture's own figure)."""
    import re
    rest = text[text.index(marker) + len(marker):]
    return float(re.search(r"[-+]?\d+\.\d+(?:[eE][-+]?\d+)?|\d+", rest).group(0))


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_framework_is_recognised_and_mapped_onto_verl_phases(logs, name):
    fw, steps, first, gen_key, step_key, phases, unmapped, _ = CASES[name]
    log = read_run_log(logs / name)
    assert log.framework.name == fw and log.framework.code  # the logging code it was read as
    assert log.framework.version_source == "not in the log" or "not in the log" in (
        log.framework.version_source)
    assert log.steps == steps and int(log.metrics["step"].iloc[0]) == first
    timed = {c[len("timing_s/"):] for c in log.metrics.columns if c.startswith("timing_s/")}
    assert phases | {"gen", "step"} <= timed
    assert not unmapped or unmapped in log.unmapped
    text = (logs / name).read_text()
    if fw != "slime":  # the first record is the first timed step (slime's is left out)
        assert log.column(GEN)[0] == pytest.approx(_value_after(text, gen_key), rel=1e-3)
    if step_key is None:  # no whole-step timer: the sum of its phases, said as such
        assert fw == "ROLL" or log.skipped.steps_from_phases == steps
    for col in ("response_length/mean", "prompt_length/mean"):
        assert col in log.metrics.columns or (fw == "SkyRL" and col.startswith("prompt"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_framework_s_shape_comes_from_its_own_launch_config(logs, name):
    log = read_run_log(logs / name)
    shape = run_shape(log, ShapeFlags(gpu="h100"))
    engines, tp, prompts, n, cap, engine = CASES[name][-1]
    assert (shape.engines, shape.tp, shape.prompts_per_step, shape.group_size,
            shape.max_response_tokens, shape.framework) == (engines, tp, prompts, n, cap, engine)
    assert shape.arch == "qwen2.5-7b"
    sources = {t.field: t.source for t in shape.taken}
    assert "actor_rollout_ref" not in sources["group_size"]  # said in the framework's own words
    assert sources["max_batch"].startswith(f"not in the {log.framework.name} log") or (
        name.startswith("skyrl") and "SkyRL's default" in sources["max_batch"])
    flagged = run_shape(log, ShapeFlags(gpu="h100", group_size=2))
    assert flagged.group_size == 2  # a flag overrides the log
    stats = step_stats(log)
    m = model_lengths(stats, shape.responses, cap, seed=0, grid=32)
    for i in range(log.steps):  # the update's tokens: the step's mean, whatever the log lacks
        assert m.lengths[i].mean() == pytest.approx(stats.mean[i], abs=0.01)


def test_slime_pairs_both_perf_lines_and_leaves_out_the_first_and_eval_steps(logs, tmp_path):
    text = (logs / "slime-qwen2.5-7b.log").read_text()
    log = read_run_log(logs / "slime-qwen2.5-7b.log")
    assert 0 not in set(log.metrics["step"])  # rollout 0: its train_wait counts from the start
    assert any("rollout 0 left out" in n for n in log.notes)
    row = log.metrics.iloc[0]
    line = text.split("\n")[int(row["line"]) - 1]
    assert "perf 1:" in line and row[STEP] == pytest.approx(_value_after(line, "'perf/step_time':"))
    assert row["sd/accept_length"] == pytest.approx(2.41)  # rollout/spec_accept_length
    assert row["prompt_length/mean"] == pytest.approx(120.5)  # total_lengths - response_lengths
    # an eval after step 3 runs inside step 4's train_wait: step 4 left out, said as such
    cut = text.replace("perf 4: {'perf/sleep_time'", "eval 3: {'eval/gsm8k': 0.5}\nX perf 4: "
                       "{'perf/sleep_time'", 1)
    (tmp_path / "eval.log").write_text(cut)
    evaluated = read_run_log(tmp_path / "eval.log")
    assert 4 not in set(evaluated.metrics["step"]) and evaluated.steps == 6
    miles = text.replace("rollout_metrics.py:268", "miles/ray/rollout/metrics.py:89")
    (tmp_path / "miles.log").write_text(miles.replace("train_metric_utils.py", "miles/utils/t.py"))
    assert read_run_log(tmp_path / "miles.log").framework.name == "miles"


def test_roll_s_step_total_is_moved_back_a_step(logs):
    log = read_run_log(logs / "roll-qwen2.5-7b.log")
    text = (logs / "roll-qwen2.5-7b.log").read_text()
    totals = [float(x.split('"time/step_total": ')[1].split(",")[0])
              for x in text.split("\n") if '"time/step_total"' in x]
    assert list(log.column(STEP)) == pytest.approx(totals[1:])  # step N's total, logged at N+1
    assert log.skipped.untimed_steps == 1  # the last step: its total never logged


def test_an_asynchronous_run_s_wait_is_not_read_as_generation(logs, tmp_path):
    text = (logs / "areal-qwen2.5-7b.log").read_text()
    (tmp_path / "async.log").write_text(text.replace("max_head_offpolicyness=0",
                                                     "max_head_offpolicyness=2"))
    with pytest.raises(ConfigError, match="asynchronous run") as exc:
        read_run_log(tmp_path / "async.log")
    assert str(tmp_path / "async.log") in str(exc.value)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_damaged_framework_log_is_refused_naming_the_file(logs, tmp_path, name):
    text = (logs / name).read_text()
    key = {"slime": "'perf/rollout_time': np.float64(", "NeMo-RL": "• generation: ",
           "SkyRL": "'timing/generate': '", "OpenRLHF": "'timing/generation': ",
           "AReaL": "│ timeperf/rollout           │ ", "ROLL": '"time/step_generate": '}[
        CASES[name][0]]
    assert key in text
    bad = tmp_path / name
    bad.write_text(text.replace(key, key + "-", 1))  # a negative rollout time
    with pytest.raises(ConfigError, match="seconds >= 0") as exc:
        read_run_log(bad)
    assert str(bad) in str(exc.value)
    only_head = tmp_path / f"head-{name}"
    only_head.write_text("\n".join(x for x in text.split("\n") if "done." not in x and
                                   "Step" not in x and "perf" not in x and "Global" not in x
                                   and "Finished" not in x and "finished" not in x
                                   and "time/" not in x) + "\n")
    with pytest.raises(ConfigError) as exc:
        read_run_log(only_head)
    assert str(only_head) in str(exc.value)


def test_a_lone_quote_in_a_log_s_head_is_no_traceback(logs, tmp_path):
    """The IndexError a miles log met in the launch-command parser (`_bare` on a word that is a
    lone quote): any word now parses, and the log reads."""
    assert parse_command(['echo "', "'", '"', "key.x=1"]).get("key.x").value == "1"
    text = (logs / "slime-qwen2.5-7b.log").read_text()
    path = tmp_path / "miles.log"
    path.write_text('echo "\nstep:1 - x\n' + text)
    assert recognise.framework(path.read_text()) is not None
    res = CliRunner().invoke(app, ["calibrate", "--run-log", str(path), "--gpu", "h200",
                                   "--fit-steps", "50", "--out", str(tmp_path / "o" / "p.yaml")])
    assert res.exit_code == 2 and "--fit-steps" in res.output and res.exception is not None
    assert not isinstance(res.exception, IndexError)


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def _field(num: int, wire: int, payload: bytes) -> bytes:
    key = _varint(num << 3 | wire)
    return key + (_varint(len(payload)) + payload if wire == 2 else payload)


def _event_file(scalars: list[tuple[int, str, float]]) -> bytes:
    """TensorBoard's records as its event.proto defines them (Event: step 2, summary 5; Summary
    value 1: tag 1, simple_value 2), checksums left zero (the reader does not check them)."""
    import struct
    out = b""
    for step, tag, value in scalars:
        val = _field(1, 2, tag.encode()) + _field(2, 5, struct.pack("<f", value))
        event = (_field(1, 1, struct.pack("<d", 1.0)) + _field(2, 0, _varint(step))
                 + _field(5, 2, _field(1, 2, val)))
        out += struct.pack("<Q", len(event)) + b"\0" * 4 + event + b"\0" * 4
    return out


def test_tracker_exports_read_like_the_console(logs, tmp_path):
    """A W&B history (CSV with two rows a step, or a JSON array with the tracker's prefixes) and
    TensorBoard scalars (the event file, or a long step/tag/value table): the console's steps."""
    import json
    import re

    import pandas as pd

    from workbench.runlog.frameworks.literals import printed_dict
    slime = read_run_log(logs / "slime-qwen2.5-7b.log")
    rows = []
    for line in (logs / "slime-qwen2.5-7b.log").read_text().split("\n"):
        m = re.search(r" (perf|rollout) (\d+): (\{.*)$", line)
        if m:
            rows.append({**printed_dict(m.group(3)).values, "rollout/step": int(m.group(2)),
                         "_step": len(rows)})
    pd.DataFrame(rows).to_csv(tmp_path / "history.csv", index=False)
    table = read_run_log(tmp_path / "history.csv")
    assert table.framework.name == "slime" and table.kind == "table"
    for col in (GEN, STEP, "response_length/mean", "prompt_length/mean", "sd/accept_length"):
        assert list(table.column(col)) == pytest.approx(list(slime.column(col)))

    openrlhf = read_run_log(logs / "openrlhf-qwen2.5-7b.log")
    scalars = [(s, "train/" + k, v) for s, d in
               ((int(m.group(1)), printed_dict(m.group(2)).values) for m in re.finditer(
                   r"Global step (\d+): (\{.*)", (logs / "openrlhf-qwen2.5-7b.log").read_text()))
               for k, v in d.items()]
    (tmp_path / "events.out.tfevents.1.host").write_bytes(_event_file(scalars))
    (tmp_path / "scalars.csv").write_text(pd.DataFrame(scalars, columns=["step", "tag", "value"])
                                          .to_csv(index=False))
    for name in ("events.out.tfevents.1.host", "scalars.csv"):
        tb = read_run_log(tmp_path / name)
        assert tb.framework.name == "OpenRLHF" and tb.steps == openrlhf.steps
        assert list(tb.column(GEN)) == pytest.approx(list(openrlhf.column(GEN)), rel=1e-6)
    (tmp_path / "events.out.tfevents.2.host").write_bytes(_event_file(scalars)[:-7])
    with pytest.raises(ConfigError, match="does not hold"):
        read_run_log(tmp_path / "events.out.tfevents.2.host")

    nemo = read_run_log(logs / "nemo-rl-qwen2.5-7b.log")
    history = [{"_step": int(s), "timing/train/generation": g, "timing/train/total_step_time": t,
                "train/mean_gen_tokens_per_sample": m, "train/mean_prompt_length": 118.0}
               for s, g, t, m in zip(nemo.metrics["step"], nemo.column(GEN), nemo.column(STEP),
                                     nemo.column("response_length/mean"))]
    (tmp_path / "nemo.json").write_text(json.dumps(history))
    tb = read_run_log(tmp_path / "nemo.json")
    assert tb.framework.name == "NeMo-RL" and list(tb.column(GEN)) == pytest.approx(
        list(nemo.column(GEN)))


def test_workload_import_takes_a_framework_s_log(logs, tmp_path):
    """Its per-step length statistics and the shape from its config; a log whose statistics cannot
    fix the spread (no longest response, none at the cap) refused, naming the log."""
    out = tmp_path / "w.yaml"
    cluster = ["--model", "qwen2.5-7b", "--gpu", "h100", "--tp", "2", "--framework", "vllm"]
    res = CliRunner().invoke(app, ["workload", "import", str(logs / "slime-qwen2.5-7b.log"),
                                   "--mode", "fit", "--out", str(out), *cluster])
    assert res.exit_code == 0, res.output
    assert "a slime run log" in res.output and "32 prompts x 8, cap 4096" in res.output
    from workbench.contracts.workload import load_workload
    wl = load_workload(out)
    assert (wl.prompts_per_step, wl.group_size, wl.max_response_tokens, wl.steps) == (32, 8, 4096,
                                                                                      7)
    bad = tmp_path / "bad" / "w.yaml"
    res = CliRunner().invoke(app, ["workload", "import", str(logs / "areal-qwen2.5-7b.log"),
                                   "--out", str(bad), *cluster])
    assert res.exit_code == 2 and "areal-qwen2.5-7b.log" in res.output
    assert "AReaL logs response_length/mean" in res.output and not bad.parent.exists()


def test_the_engines_running_batch_is_read_per_step_and_set_against_the_simulated(logs):
    """SGLang's Decode batch lines of each step's rollout: their mean per step against the
    simulated running batch (response tokens per engine over engine passes)."""
    import numpy as np

    from workbench.runlog.lengths import ModelledLengths
    from workbench.runlog.log_report import running_check, running_lines
    log = read_run_log(logs / "slime-qwen2.5-7b.log")
    assert log.running.source == "sglang" and log.running.samples == 40
    assert np.isfinite(log.running.accept_len).all()  # SGLang's accept len, with SD on
    said = "\n".join(running_lines(log))
    assert "median 32" in said and "largest 256" in said and "accepted length 2.4" in said
    n = log.steps
    lengths = ModelledLengths([np.full(256, 500)] * n, np.ones(n), np.zeros(n), np.zeros(n), 0.5)
    passes = np.full((n, 4), 1000.0)  # 4 engines: 256 x 500 / 4 / 1000 = 32 per pass
    (line,) = running_check(log, lengths, passes, 4)
    assert "measured 84.8, simulated 32.0" in line  # the lines: 256, 128, 32, 6, 2 a step
