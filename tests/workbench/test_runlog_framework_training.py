"""Other frameworks' logs priced by the phase model: each reader's training shape from its own
launch settings, a combined timer priced as the passes it holds, the weight sync timed apart
priced by its own phase and not inside the rollout, and a micro-batch change in slime's printed
config moving the predicted actor_train as the phase model says.

The logs are traces/published/framework-logs/ (written from each framework's logging code, made-up
numbers); the synthetic forward grid costs one microsecond a token."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.contracts.schema import ConfigError
from workbench.contracts.training_shape import Offload
from workbench.runlog import engine
from workbench.runlog.engine_config import engine_config
from workbench.runlog.forward_costs import BATCHES, LENGTHS, ForwardGrid
from workbench.runlog.lengths import step_stats
from workbench.runlog.phases import BASES, phase_bases, step_bases
from workbench.runlog.prepared import on_run, prepare
from workbench.runlog.priors import SYNC_BYTES_PER_S, SYNC_CALLS_S, run_priors
from workbench.runlog.reader import read_run_log
from workbench.runlog.shape import ShapeFlags, run_shape

FLAGS = ShapeFlags(gpu="h100")
# file -> (strategy, training GPUs (0: the run's), TP, {timer: roles of its passes}, the update's
# (sequences, tokens) per micro-batch, its optimizer steps)
CASES = {
    "slime-qwen2.5-7b.log": ("megatron", 8, 2, {"old_log_prob": ["actor"], "ref": ["ref"],
                                                "update_actor": ["actor"]}, (0, 9216), 1),
    "nemo-rl-qwen2.5-7b.log": ("fsdp2", 0, 1, {"old_log_prob": ["actor", "ref"],
                                               "update_actor": ["actor"]}, (0, 8192), 1),
    "skyrl-qwen2.5-7b.log": ("fsdp2", 8, 1, {"old_log_prob": ["actor", "ref"],
                                             "update_actor": ["actor"]}, (2, 0), 4),
    "openrlhf-qwen2.5-7b.log": ("zero3", 8, 1, {"old_log_prob": ["actor", "ref"],
                                                "update_actor": ["actor"]}, (4, 0), 4),
    "areal-qwen2.5-7b.log": ("fsdp", 8, 1, {"old_log_prob": ["actor"], "ref": ["ref"],
                                            "update_actor": ["actor"]}, (0, 16384), 4),
    "roll-qwen2.5-7b.log": ("megatron", 8, 1, {"ref": ["ref"], "old_log_prob": ["actor"],
                                               "update_actor": ["actor"]}, (2, 0), 2),
}


@pytest.fixture(scope="module")
def logs(repo_root):
    return repo_root / "traces" / "published" / "framework-logs"


def _grid(value_head: bool = False) -> ForwardGrid:
    seconds = tuple(tuple(1e-6 * b * n for n in LENGTHS) for b in BATCHES)
    return ForwardGrid("qwen2.5-7b", "h100", 1, value_head, seconds, 3e12, 152064)


def _training(path):
    log = read_run_log(path)
    shape = run_shape(log, FLAGS)
    return log, shape, on_run(log.training, shape, log.path)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_framework_s_training_comes_from_its_own_launch_settings(logs, name):
    """The strategy, the training's GPUs and TP, which passes each timer holds, the update's
    micro-batches and optimizer steps: as the framework's printed config says, each setting with
    the log's line, each default flagged as not in the log."""
    strategy, gpus, tp, timers, (seqs, tokens), minis = CASES[name]
    log = read_run_log(logs / name)
    t = log.training
    assert (t.strategy, t.gpus, t.tp) == (strategy, gpus, tp)
    got: dict[str, list[str]] = {}
    for p in t.phases:
        got.setdefault(p.phase, []).append(p.role)
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in timers.items()}
    update = t.phase("update_actor")
    assert (update.micro_batch, update.max_tokens, update.mini_batches) == (seqs, tokens, minis)
    assert any(x.source.startswith("log: ") and ", line " in x.source for x in t.taken)
    for x in t.taken:  # the log's line, the framework's default (flagged), or worked out
        assert (x.source.startswith(("log: ", "not in the log: ")) or "default)" in x.source
                or x.field == "training allocation"), x
    done = on_run(t, run_shape(log, FLAGS), log.path)
    assert done.gpus == (gpus or 8) and {m.arch for m in done.models} == {"qwen2.5-7b"}


@pytest.mark.parametrize("name", ["nemo-rl-qwen2.5-7b.log", "skyrl-qwen2.5-7b.log",
                                  "openrlhf-qwen2.5-7b.log"])
def test_a_combined_timer_is_priced_as_the_passes_it_holds(logs, name):
    """NeMo-RL's policy_and_reference_logprobs, SkyRL's fwd_logprobs_values_reward and OpenRLHF's
    make_experience (read as old_log_prob): the policy's and the reference's forwards summed, each
    dispatched (two fixed costs), not one forward."""
    log, shape, t = _training(logs / name)
    stats = step_stats(log)
    grids = {"actor": _grid(), "ref": _grid(), "critic": _grid(True)}
    bases = step_bases(t, grids, stats, shape.responses, ("gen", "old_log_prob"), 0.0)
    from workbench.runlog.phases import sequence_length
    length = sequence_length(t, stats)
    passes = [p for p in t.phases if p.phase == "old_log_prob"]
    assert [p.role for p in passes] == ["actor", "ref"]
    one = [phase_bases(t, p, grids[p.role], length, shape.responses) for p in passes]
    np.testing.assert_allclose(bases.of("old_log_prob"), one[0] + one[1])
    assert np.all(bases.of("old_log_prob")[:, BASES.index("fixed")] == 2.0)
    assert np.all(bases.of("old_log_prob")[:, 0] > one[0][:, 0])


def test_the_weight_sync_timed_apart_is_priced_by_its_own_phase_not_the_rollout(logs):
    """slime times update_weights on its own: the rollout's fixed-cost prior leaves the sync out
    (by exactly its calls and bytes), and the update_weights phase prices it."""
    log, shape, t = _training(logs / "slime-qwen2.5-7b.log")
    eng = engine_config(log, shape.framework)
    apart, inside = (run_priors(shape, eng, t, flag)["rl_step_s"] for flag in (True, False))
    params = 2.0 * 7_615_616_512  # Qwen2.5-7B's bf16 bytes
    assert inside.median - apart.median == pytest.approx(SYNC_CALLS_S + params / SYNC_BYTES_PER_S,
                                                         rel=1e-3)
    assert "no weight sync (the log times it apart" in apart.why
    stats = step_stats(log)
    grids = {"actor": _grid(), "ref": _grid(), "critic": _grid(True)}
    b = step_bases(t, grids, stats, shape.responses, ("gen", "update_weights"), 42.0)
    assert np.all(b.of("update_weights")[:, BASES.index("fixed")] == 42.0)
    assert np.all(b.of("gen") == 0.0)  # nothing of the sync, nor of a model, in the rollout


def _slime(path, logs, **args: str) -> None:
    """The slime log with some of its Megatron arguments changed."""
    lines = []
    for line in (logs / "slime-qwen2.5-7b.log").read_text().split("\n"):
        for k, v in args.items():
            if f"   {k} ." in line:
                line = line[: line.rindex(" ") + 1] + v
        lines.append(line)
    path.write_text("\n".join(lines))


@pytest.fixture(autouse=True)
def _profile_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "phases-cache"))


def test_a_micro_batch_change_in_slime_s_config_moves_actor_train_as_the_phase_model_says(
        logs, tmp_path):
    """Static micro-batches of 1, then of 4 sequences (`micro_batch_size` in Megatron's arguments
    dump): 256 samples over 4 data-parallel ranks are 64 micro-batches, then 16, each paying its
    28 layers' launches 4 times (forward, backward, recompute); at the same factors the predicted
    actor_train falls by the launches and the small micro-batches' slower kernels, and the phases
    it does not touch do not move."""
    one, four = tmp_path / "mbs1.log", tmp_path / "mbs4.log"
    _slime(one, logs, use_dynamic_batch_size="False", micro_batch_size="1")
    _slime(four, logs, use_dynamic_batch_size="False", micro_batch_size="4")
    a, b = prepare(one, FLAGS), prepare(four, FLAGS)
    assert a.training.phase("update_actor").micro_batch == 1
    assert b.training.phase("update_actor").micro_batch == 4
    launch = BASES.index("launch")
    ua, ub = a.work.bases.of("update_actor"), b.work.bases.of("update_actor")
    np.testing.assert_allclose(ua[:, launch], 64 * 4 * 28)
    np.testing.assert_allclose(ub[:, launch], 16 * 4 * 28)
    values = a.priors.medians
    pa, pb = engine.predict(a.work, values), engine.predict(b.work, values)
    moved = pa.of("update_actor") - pb.of("update_actor")
    train = list(values[3:])
    expected = (ua - ub) @ np.array(train)
    np.testing.assert_allclose(moved, expected, rtol=1e-9)
    assert np.all(moved > (64 - 16) * 4 * 28 * values[4] * 0.999)  # at least the launches
    for phase in ("gen", "update_weights"):
        np.testing.assert_allclose(pa.of(phase), pb.of(phase))


def test_a_bad_training_setting_is_refused_naming_the_file_and_the_setting(logs, tmp_path):
    bad = tmp_path / "bad.log"
    _slime(bad, logs, micro_batch_size="many")
    with pytest.raises(ConfigError, match="bad.log.*micro_batch_size"):
        read_run_log(bad)
    odd = tmp_path / "odd.log"
    _slime(odd, logs, tensor_model_parallel_size="3")
    log = read_run_log(odd)
    with pytest.raises(ConfigError, match="odd.log.*'tp'.*training settings"):
        on_run(log.training, run_shape(log, FLAGS), log.path)


def test_extracted_metrics_are_refused_for_another_framework_s_log(logs, tmp_path):
    """`tlt runlog extract` keeps veRL's names and launch keys: another framework's log would read
    back as veRL's, its semantics and training lost, so it is refused naming the framework."""
    from workbench.runlog.extract import Provenance, extract
    out = tmp_path / "x.metrics.json"
    with pytest.raises(ConfigError, match="is a slime log"):
        extract(logs / "slime-qwen2.5-7b.log", Provenance("a/b", "c", "d.log"), out)
    assert not out.exists()


def test_a_tracker_export_trains_as_the_framework_s_defaults(logs, tmp_path):
    """A W&B history holds no launch config: slime's training from slime's and Megatron's
    defaults, each flagged as not in the log."""
    import re

    import pandas as pd

    from workbench.runlog.frameworks.literals import printed_dict
    rows = []
    for line in (logs / "slime-qwen2.5-7b.log").read_text().split("\n"):
        m = re.search(r" (perf|rollout) (\d+): (\{.*)$", line)
        if m:
            rows.append({**printed_dict(m.group(3)).values, "rollout/step": int(m.group(2))})
    pd.DataFrame(rows).to_csv(tmp_path / "history.csv", index=False)
    t = read_run_log(tmp_path / "history.csv").training
    assert (t.strategy, t.tp, t.phase("update_actor").micro_batch) == ("megatron", 1, 1)
    assert all(x.source.startswith("not in the log") for x in t.taken)
    assert t.model("actor").param_offload == Offload.NONE
