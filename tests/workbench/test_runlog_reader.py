"""Reading a veRL run log: console lines of both name generations, tables, the launch command, the
run's shape from it or from flags, what is skipped, and every bad file refused (exit 2, nothing
written)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from workbench.cli import app
from workbench.contracts.schema import ConfigError
from workbench.runlog.command import parse_command
from workbench.runlog.lengths import model_lengths, step_stats
from workbench.runlog.reader import GEN, read_run_log
from workbench.runlog.training import training_shape
from workbench.runlog.shape import ShapeFlags, run_shape

GRPO = "grpo_run_deepseek7b_llm.log.gz"
PPO = "ppo_run_deepseek7b_llm.log.gz"
COMMAND = """```
MODEL_PATH="deepseek-ai/deepseek-llm-7b-chat"
TP_VALUE=2 #default:2
python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.train_batch_size=16 \\
    data.max_response_length=256 \\
    actor_rollout_ref.model.path=$MODEL_PATH \\
    actor_rollout_ref.rollout.tensor_model_parallel_size=${TP_VALUE} \\
    actor_rollout_ref.rollout.n=4 \\
    trainer.n_gpus_per_node=4 \\
    +trainer.nnodes=1
```
"""


def step_line(step: int, gen: float = 10.0, prefix: str = "timing_s", **extra: float) -> str:
    values = {
        "response_length/mean": 60.0,
        "response_length/max": 200.0,
        "response_length/min": 5.0,
        "response_length/clip_ratio": 0.0,
        "prompt_length/mean": 40.0,
        f"{prefix}/gen": gen,
        f"{prefix}/update_actor": 3.0,
        f"{prefix}/step": gen + 5.0,
        **extra,
    }
    return f"step:{step} - " + " - ".join(f"{k}:{v}" for k, v in values.items()) + "\n"


@pytest.fixture(scope="module")
def verl_runs(repo_root):
    return repo_root / "traces" / "published" / "verl-runs"


def test_the_shipped_grpo_log_reads_whole(verl_runs):
    log = read_run_log(verl_runs / GRPO)
    assert log.steps == 1119 and log.kind == "console" and not log.old_names
    assert log.skipped.untimed_steps == 1  # veRL's last line: step:1120 - val/test_score...:0.697
    assert log.skipped.other_lines > 1000  # the command, warnings, validation samples
    assert log.column(GEN)[0] == pytest.approx(63.055)
    assert log.where(0).endswith(":53")


def test_the_launch_command_resolves_shell_variables(verl_runs):
    log = read_run_log(verl_runs / GRPO)
    tp = log.command.get("actor_rollout_ref.rollout.tensor_model_parallel_size")
    assert (tp.value, tp.written) == ("2", "$TP_VALUE")
    assert (
        log.command.get("actor_rollout_ref.model.path").value == "deepseek-ai/deepseek-llm-7b-chat"
    )
    assert log.command.get("data.train_files").unresolved == "train_files"
    cmd = parse_command(COMMAND.splitlines())
    assert (
        cmd.get("actor_rollout_ref.rollout.tensor_model_parallel_size").value == "2"
    )  # ${TP_VALUE}
    assert cmd.get("trainer.nnodes").value == "1"  # Hydra's + prefix


def test_the_shape_comes_from_the_log_and_flags_override_it(verl_runs):
    log = read_run_log(verl_runs / GRPO)
    shape = run_shape(log, ShapeFlags(gpu="h100"))
    assert (
        shape.engines,
        shape.tp,
        shape.prompts_per_step,
        shape.group_size,
        shape.max_response_tokens,
    ) == (4, 2, 1024, 5, 1024)
    assert shape.arch == "deepseek-llm-7b-chat"
    # how it trains, from the launch command: GRPO (no critic), the reference offloaded (FSDP's
    # CPUOffload in the veRL of the *_per_gpu keys), micro-batches per GPU, packed sequences
    t = training_shape(log, shape)
    assert [p.phase for p in t.phases] == ["update_actor", "old_log_prob", "ref"]
    assert [p.micro_batch for p in t.phases] == [80, 110, 110] and t.remove_padding
    assert t.model("ref").param_offload == "forward" and t.model("actor").checkpointing
    assert t.phase("update_actor").mini_batches == 4 and t.dp == 8
    taken = {t.field: t.source for t in shape.taken}
    assert taken["tp"].startswith(
        "log: actor_rollout_ref.rollout.tensor_model_parallel_size=$TP_VALUE"
    )
    assert taken["max_batch"].startswith("veRL's default")
    flagged = run_shape(log, ShapeFlags(gpu="h100", tp=4, group_size=2))
    assert (flagged.engines, flagged.group_size) == (2, 2)
    assert {t.field: t.source for t in flagged.taken}["tp"] == "flag --tp"


def test_a_ppo_log_has_a_critic_and_no_rollout_n(verl_runs):
    log = read_run_log(verl_runs / PPO)
    with pytest.raises(ConfigError, match="actor_rollout_ref.rollout.n.*--group-size"):
        run_shape(log, ShapeFlags(gpu="h100"))
    shape = run_shape(log, ShapeFlags(gpu="h100", group_size=1))
    assert (shape.engines, shape.max_response_tokens) == (2, 512)
    t = training_shape(log, shape)
    assert t.model("critic").value_head and t.model("critic").checkpointing
    assert [p.phase for p in t.phases] == ["update_actor", "old_log_prob", "ref", "values",
                                           "update_critic"]
    assert [p.micro_batch for p in t.phases] == [16, 32, 32, 32, 32]


def test_older_timing_names_read_as_new_ones(tmp_path):
    path = tmp_path / "old.log"
    path.write_text(COMMAND + "".join(step_line(s, 8.0 + s, prefix="timing") for s in (1, 2, 3)))
    log = read_run_log(path)
    assert log.old_names and log.steps == 3
    np.testing.assert_allclose(log.column(GEN), [9.0, 10.0, 11.0])


def test_ray_prefixes_colours_unknown_lines_and_a_cut_last_line_are_skipped(tmp_path):
    path = tmp_path / "noisy.log"
    lines = [
        COMMAND,
        "WARNING something\n",
        f"(main_task pid=42) \x1b[36m{step_line(1).rstrip()}\x1b[0m\n",
        "[prompt] what is 2+2\n",
        step_line(2),
        "step:3 - val/test_score/openai/gsm8k:0.5\n",
        step_line(4),
        step_line(5)[:60],
    ]
    path.write_text("".join(lines))
    log = read_run_log(path)
    assert list(log.metrics["step"]) == [1, 2, 4]
    assert (log.skipped.untimed_steps, log.skipped.truncated) == (1, 1)
    assert log.skipped.other_lines >= 2


def test_a_table_export_reads_like_the_console(tmp_path):
    rows = [
        {
            "_step": s,
            "timing/gen": 10.0 + s,
            "timing/step": 15.0 + s,
            "response_length/mean": 60.0,
            "response_length/max": 200.0,
            "prompt_length/mean": 40.0,
        }
        for s in range(1, 6)
    ]
    rows.append({"_step": 6, "val/test_score": 0.5})
    for path in (tmp_path / "m.csv", tmp_path / "m.jsonl", tmp_path / "m.parquet"):
        frame = pd.DataFrame(rows)
        if path.suffix == ".csv":
            frame.to_csv(path, index=False)
        elif path.suffix == ".jsonl":
            path.write_text(
                "".join(json.dumps({k: v for k, v in r.items() if v == v}) + "\n" for r in rows)
            )
        else:
            frame.to_parquet(path)
        log = read_run_log(path)
        assert log.kind == "table" and log.steps == 5 and log.skipped.untimed_steps == 1
        np.testing.assert_allclose(log.column(GEN), [11, 12, 13, 14, 15])


def test_each_step_s_modelled_lengths_keep_its_statistics(verl_runs):
    log = read_run_log(verl_runs / GRPO)
    stats = step_stats(log)
    m = model_lengths(stats, 5120, 1024, seed=0, grid=8)
    for i in (0, 5, 300):
        x = m.lengths[i]
        assert len(x) == 5120
        assert x.mean() == pytest.approx(stats.mean[i], abs=1e-3)  # the update's tokens exactly
        assert x.max() == stats.max[i]
        assert int((x >= 1024).sum()) == max(
            int(stats.max[i] >= 1024), round(stats.clip_ratio[i] * 5120)
        )
    assert np.array_equal(m.lengths[3], model_lengths(stats, 5120, 1024, seed=0, grid=8).lengths[3])
    assert not np.array_equal(
        m.lengths[3], model_lengths(stats, 5120, 1024, seed=1, grid=8).lengths[3]
    )


def test_a_length_no_response_has_is_refused_at_its_line(tmp_path):
    """A damaged mean length (1e300 tokens) is refused naming the step and key, before the
    lengths are modelled (it would overflow their token count)."""
    path = tmp_path / "huge.log"
    path.write_text(COMMAND + step_line(1) + step_line(2, **{"response_length/mean": 1e300}))
    with pytest.raises(ConfigError) as e:
        step_stats(read_run_log(path))
    assert "response_length/mean" in str(e.value) and "huge.log" in str(e.value)
    assert "at most 16,777,216" in str(e.value)


BAD_LOGS = {
    "no step lines": ("just a warning\nanother line\n", "no step lines"),
    "no timed step": ("step:1 - val/test_score:0.5\nstep:2 - val/test_score:0.6\n", "timing_s/gen"),
    "negative timing": (step_line(1) + step_line(2, gen=-3.0) + step_line(3), "timing_s/gen"),
    "non-numeric timing": (
        step_line(1).replace("timing_s/gen:10.0", "timing_s/gen:fast") + step_line(2),
        "timing_s/gen",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_LOGS))
def test_a_bad_log_is_refused_naming_the_file_line_and_key(tmp_path, case):
    text, key = BAD_LOGS[case]
    path = tmp_path / "bad.log"
    path.write_text(COMMAND + text)
    with pytest.raises(ConfigError, match=key) as exc:
        read_run_log(path)
    assert str(path) in str(exc.value)
    if case in ("negative timing", "non-numeric timing"):
        assert f"{path}:{COMMAND.count(chr(10)) + 1 + (case == 'negative timing')}" in str(
            exc.value
        )


def _calibrate(tmp_path, log, *extra):
    out = tmp_path / "out" / "p.yaml"
    res = CliRunner().invoke(
        app,
        [
            "calibrate",
            "--run-log",
            str(log),
            "--gpu",
            "h100",
            "--out",
            str(out),
            "--workload-out",
            str(tmp_path / "out" / "w.yaml"),
            *extra,
        ],
    )
    return res, out


def test_bad_files_and_flags_exit_2_with_nothing_written(tmp_path):
    binary = tmp_path / "noise.log"  # mostly binary (a few stray bytes in a text log are read)
    binary.write_bytes(bytes(range(32)) * 40 + b"step:1 - timing_s/gen:1\n")
    short = tmp_path / "short.log"
    short.write_text(COMMAND + "".join(step_line(s) for s in range(1, 6)))
    cases = [
        (binary, [], "binary", str(binary)),
        (short, ["--fit-steps", "5"], "--fit-steps", str(short)),
        (short, ["--fit-steps", "3", "--tp", "3"], "divides the run's 4 GPUs", str(short)),
        (short, ["--fit-steps", "3", "--arch", "no-such-model"], "architecture preset", "--arch"),
    ]
    for case, (text, key) in BAD_LOGS.items():
        path = tmp_path / f"{case.replace(' ', '-')}.log"
        path.write_text(COMMAND + text)
        cases.append((path, ["--fit-steps", "1"], key, str(path)))
    for log, extra, message, where in cases:
        res, out = _calibrate(tmp_path, log, *extra)
        assert res.exit_code == 2, res.output
        assert message in res.output and where in res.output, res.output
        assert not out.parent.exists() or not any(out.parent.iterdir())


def test_a_gzipped_log_reads_as_its_text(tmp_path):
    text = COMMAND + "".join(step_line(s) for s in range(1, 4))
    with gzip.open(tmp_path / "run.log.gz", "wt") as fh:
        fh.write(text)
    (tmp_path / "run.log").write_text(text)
    a, b = read_run_log(tmp_path / "run.log.gz"), read_run_log(tmp_path / "run.log")
    pd.testing.assert_frame_equal(a.metrics, b.metrics)
