"""Run-log calibration that means something: veRL's printed config read (behind Ray prefixes, among
other processes' lines, cut short), older logs (phases summed into a step, stray bytes counted, a
binary file refused), the priors from the engine's config (binding where the data say nothing, and
flagged), an engine profile tightening them, and the intervals' coverage computed."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError
from workbench.runlog import fit, predictive
from workbench.contracts.run_factors import PhaseScatter
from workbench.runlog.engine import StepWork
from workbench.runlog.phases import BASES, StepBases
from workbench.runlog.engine_config import engine_config
from workbench.runlog.errors import Measured
from workbench.runlog.factor_report import factor_lines
from workbench.runlog.priors import FactorPrior, RunPriors, run_priors
from workbench.runlog.printed_config import parse_printed_config
from workbench.runlog.reader import STEP, read_run_log
from workbench.runlog.run_profile import run_factors
from workbench.runlog.shape import ShapeFlags, run_shape
from workbench.runlog.training import training_shape

SHAPE = SimpleNamespace(train_forwards=6, gen_forwards=0)
P = "(main_task pid=7773) "
OTHER = "(pid=8238) "
PRINTED = [
    "bash run.sh \"trainer.n_gpus_per_node=2 data.train_batch_size=64 critic.model.path=m\"",
    P + "{'actor_rollout_ref': {'actor': {'clip_ratio': 0.2,",
    P + "                                 'strategy': 'fsdp'},",
    P + "                       'model': {'enable_gradient_checkpointing': False,",
    P + "                                 'path': 'deepseek-ai/deepseek-llm-7b-chat'},",
    OTHER + "/usr/lib/vllm/connections.py:8: RuntimeWarning: Failed to read commit hash:",
    P + "/usr/lib/vllm/connections.py:8: RuntimeWarning: same process, not the dict",
    P + "  from vllm.version import __version__ as VLLM_VERSION",
    P + "                       'rollout': {'enforce_eager': True,",
    P + "                                   'free_cache_engine': False,",
    P + "                                   'gpu_memory_utilization': 0.4,",
    P + "                                   'max_num_seqs': 256,",
    P + "                                   'name': 'vllm',",
    P + "                                   'tensor_model_parallel_size': 2}},",
    P + " 'data': {'max_prompt_length': 512,",
    P + "          'max_response_length': 256,",
    P + "          'train_batch_size': 32},",
    P + " 'trainer': {'n_gpus_per_node': 4,",
    P + "             'experiment_name': 'x',(pid=934604) another process wrote here",
    "(WorkerDict pid=1) INFO Initializing an LLM engine (v0.6.3) with config: model='m', "
    "enforce_eager=True, enable_chunked_prefill=False, seed=0",
]


def _step(n: int, gen: float, **extra: float) -> str:
    values = {"timing/gen": gen, "timing/ref": 2.0, "timing/values": 1.0, "timing/adv": 0.1,
              "timing/update_critic": 4.0, "timing/update_actor": 5.0,
              "response_length/mean": 100.0, "response_length/max": 256.0,
              "response_length/min": 5.0, "prompt_length/mean": 80.0, **extra}
    return f"{P}step:{n} - " + " - ".join(f"{k}:{v}" for k, v in values.items())


def test_the_printed_config_is_read_behind_ray_prefixes_and_other_processes():
    pc = parse_printed_config(PRINTED)
    assert pc.get("actor_rollout_ref.rollout.enforce_eager").value is True
    assert pc.get("actor_rollout_ref.rollout.free_cache_engine").value is False
    assert pc.get("actor_rollout_ref.rollout.max_num_seqs").value == 256
    assert pc.get("actor_rollout_ref.model.path").value == "deepseek-ai/deepseek-llm-7b-chat"
    assert pc.get("data.max_response_length").value == 256
    assert pc.get("data.max_response_length").line == 16  # its key's line in the log
    # cut short where another process wrote into its last line: the entries before it are kept
    assert pc.get("trainer.n_gpus_per_node").value == 4
    assert pc.get("trainer.experiment_name") is None
    assert pc.engine_version == "0.6.3" and pc.engine_setting("enable_chunked_prefill") == "False"


def test_the_shape_and_engine_come_from_the_command_then_the_printed_config(tmp_path):
    path = tmp_path / "old.log"
    path.write_text("\n".join(PRINTED + [_step(1, 10.0), _step(2, 11.0)]) + "\n")
    log = read_run_log(path)
    shape = run_shape(log, ShapeFlags(gpu="h100"))
    taken = {t.field: t.source for t in shape.taken}
    # the wrapper script's quoted overrides win over the printed config (data.train_batch_size)
    assert shape.prompts_per_step == 64 and taken["prompts_per_step"].startswith("log: data.")
    assert shape.gpus == 2 and "veRL's default" in taken["gpus"]  # nnodes never printed
    assert shape.max_response_tokens == 256 and "printed config" in taken["max_response_tokens"]
    assert shape.max_batch == 256 and shape.tp == 2
    assert shape.group_size == 1 and "no n" in taken["group_size"]  # a veRL before rollout.n
    # the actor without checkpointing (printed), a critic with (veRL's default since 2025)
    t = training_shape(log, shape)
    assert not t.model("actor").checkpointing and t.model("critic").checkpointing
    assert t.model("critic").value_head and t.log_probs_in_gen  # no old_log_prob timed
    assert [p.phase for p in t.phases] == ["update_actor", "gen", "ref", "values", "update_critic"]
    eng = engine_config(log, shape.framework)
    assert eng.enforce_eager is True and eng.free_cache_engine is False
    assert eng.version == "vllm 0.6.3" and eng.value("enable_chunked_prefill") is False


def test_a_step_without_its_step_time_is_its_phases_summed(tmp_path):
    path = tmp_path / "phases.log"
    nested = {"timing_s/generate_sequences": 8.0}  # timed inside gen: not added again
    path.write_text("\n".join([_step(1, 10.0, **nested), _step(2, 12.0)]) + "\n")
    log = read_run_log(path)
    np.testing.assert_allclose(log.column(STEP), [10 + 12.1, 12 + 12.1])
    assert log.skipped.steps_from_phases == 2 and "sum of their phases" in log.skipped.describe()


def test_stray_bytes_are_read_and_counted_and_a_binary_file_is_refused(tmp_path):
    text = "\n".join(PRINTED + [_step(1, 10.0), _step(2, 11.0)]) + "\n"
    raw = text.encode()
    at = raw.index(b"(pid=8238)")
    stray = raw[:at] + b"\x00\x00\xff\xfe" + raw[at:] + b"\x00\n"
    path = tmp_path / "nccl.log"
    path.write_bytes(stray)
    log = read_run_log(path)
    assert log.steps == 2 and log.skipped.stray_bytes == 5
    assert "5 stray bytes" in log.skipped.describe()
    binary = tmp_path / "weights.log"
    rng = np.random.default_rng(0)
    binary.write_bytes(rng.integers(0, 256, 20000, dtype=np.uint8).tobytes() + stray)
    with pytest.raises(ConfigError, match="binary"):
        read_run_log(binary)


def _work(engine_s: np.ndarray, passes: np.ndarray) -> StepWork:
    """Steps whose only phase is the rollout (no model outside it)."""
    bases = StepBases(("gen",), np.zeros((1, len(engine_s), len(BASES))))
    return StepWork(engine_s, passes, bases, np.full(len(engine_s), 1e5))


def _measured(gen: np.ndarray) -> Measured:
    return Measured(gen, np.zeros(len(gen)), gen, ("gen",), gen[None, :])


def _fit_set(passes: np.ndarray, priors: RunPriors) -> fit.FitSet:
    """A log of 60 steps whose rollout is 2 x the database's work + 5 s, per-step costs aside."""
    rng = np.random.default_rng(1)
    engine_s = rng.uniform(10, 20, (60, 2))
    gen = (2.0 * engine_s).max(axis=1) + 5.0
    gen *= np.exp(rng.normal(0, 0.01, 60))
    return fit.FitSet(_work(engine_s, passes), _measured(gen), 40, priors)


PRIORS = RunPriors((FactorPrior("decode_speed", 1.5, 0.35, "test"),
                    FactorPrior("step_overhead_s", 0.01, 0.6, "test"),
                    FactorPrior("rl_step_s", 4.0, 0.6, "test"),
                    FactorPrior("train_speed", 1.5, 0.5, "test"),
                    FactorPrior("launch_s", 8e-4, 0.7, "test"),
                    FactorPrior("gather_s_per_gb", 0.01, 0.8, "test"),
                    FactorPrior("offload_s_per_gb", 0.08, 0.8, "test"),
                    FactorPrior("phase_s", 0.2, 1.0, "test"),
                    FactorPrior("reward_s", 2e-4, 1.0, "test")))


def test_a_factor_the_data_say_nothing_of_stays_at_its_prior_and_is_flagged():
    """No engine step in the work: nothing in the data moves the per-step cost, so its posterior is
    its prior (median, spread), flagged, and the report names what would identify it."""
    post = fit.fit_posterior([_fit_set(np.zeros((60, 2)), PRIORS)])
    assert abs(post.z[1]) < 0.05  # the MAP stays at the prior's median
    assert post.status(1) == "prior"
    assert post.sd[1] == pytest.approx(0.6, rel=0.25)  # its draws spread as the prior does
    assert post.status(0) == "identified" and post.status(2) == "identified"
    assert np.exp(post.z[0]) * 1.5 == pytest.approx(2.0, rel=0.05)  # what the data say
    lines = "\n".join(factor_lines(post, PRIORS, run_factors(post.z, PRIORS, 6, "db", "")))
    assert "step_overhead_s" in lines and "NOT IDENTIFIED: its prior sets it" in lines
    assert "would identify it: a log of the cluster at another response cap" in lines
    # every factor inside its declared range, its standard error printed
    lo = np.array([p.lower for p in PRIORS.factors])
    hi = np.array([p.upper for p in PRIORS.factors])
    values = PRIORS.medians * np.exp(post.draws)
    assert np.all(values >= lo * (1 - 1e-9)) and np.all(values <= hi * (1 + 1e-9))


def test_a_factor_the_data_pull_past_its_range_stops_at_its_end_flagged():
    """A per-token speed 4x the database's against a prior whose range ends at 1.5 x 2.4: the
    factor stops at the range's end and says so."""
    tight = RunPriors((replace(PRIORS.factors[0], median=1.0),) + PRIORS.factors[1:])
    fs = _fit_set(np.full((60, 2), 100.0), tight)
    fs = replace(fs, measured=replace(fs.measured, gen_s=fs.measured.gen_s * 2.5))
    post = fit.fit_posterior([fs])
    assert post.status(0) == "edge" and post.z[0] == pytest.approx(2.5 * 0.35, abs=0.02)


def test_the_engine_config_sets_the_priors_medians(tmp_path):
    path = tmp_path / "old.log"
    path.write_text("\n".join(PRINTED + [_step(1, 10.0), _step(2, 11.0)]) + "\n")
    log = read_run_log(path)
    shape = run_shape(log, ShapeFlags(gpu="h100"))
    t = training_shape(log, shape)
    eager = run_priors(shape, engine_config(log, shape.framework), t)
    assert eager["step_overhead_s"].median == pytest.approx(30 * 5e-4)  # 30 layers, eager
    assert "KV cache" not in eager["rl_step_s"].why  # free_cache_engine False
    graphs_log = replace(log, config=replace(log.config, values=tuple(
        (k, replace(v, value=False) if k.endswith("enforce_eager") else v)
        for k, v in log.config.values)))
    graphs = run_priors(shape, engine_config(graphs_log, shape.framework), t)
    assert graphs["step_overhead_s"].median < eager["step_overhead_s"].median
    # 7B parameters in bf16 at 10 GB/s: the weight sync's share of the fixed cost
    assert "13.8 GB" in eager["rl_step_s"].why


def test_interval_coverage_is_computed_on_the_steps_given():
    """The intervals from a posterior's draws hold the steps they should, miss a run 50% slower,
    and with the model's error of a change of run added, widen."""
    rng = np.random.default_rng(2)
    work = _work(rng.uniform(10, 20, (50, 2)), np.full((50, 2), 300.0))
    draws = rng.normal(0, 0.02, (100, len(PRIORS.factors)))
    post = SimpleNamespace(draws=draws, z=np.zeros(len(PRIORS.factors)),
                           scatter=(PhaseScatter("gen", -0.05, 0.05, 0.02),
                                    PhaseScatter("step", -0.05, 0.05, 0.02)))
    f = run_factors(np.zeros(len(PRIORS.factors)), PRIORS, 6, "db", "", post)
    gen = (f.decode_speed * work.engine_s + f.step_overhead_s * work.passes).max(axis=1)
    gen = gen + f.rl_step_s
    meas = _measured(gen * np.exp(rng.normal(0, 0.03, 50)))
    rows = np.arange(50)
    c = predictive.coverage(f, work, meas, rows, change=False).gen
    assert 0.8 <= c.step_share <= 1.0 and c.median_inside and c.steps == 50
    off = _measured(meas.gen_s * 1.5)  # the run 50% slower
    c = predictive.coverage(f, work, off, rows, change=False).gen
    assert c.step_share == 0.0 and not c.median_inside
    # the model's error under a change of run widens every interval: the same run, another
    # log's, covers more of its 20% slower steps
    biased = _measured(meas.gen_s * 1.2)
    own = predictive.coverage(f, work, biased, rows, change=False)
    other = predictive.coverage(f, work, biased, rows, change=True, model_error=0.2)
    lo, hi = own.gen.median_interval
    lo2, hi2 = other.gen.median_interval
    assert lo2 < lo and hi2 > hi and other.model_error == 0.2 and own.model_error == 0.0
    assert other.gen.step_share > own.gen.step_share
    # no draws, no interval
    assert predictive.coverage(replace(f, draws=()), work, meas, rows, change=False) is None


def test_an_engine_profile_measured_on_the_gpu_tightens_the_priors_it_measures():
    """`--engine-profile`: its per-token time over the database's becomes the decode-speed prior
    (log-sd 0.1); its per-step cost the per-step prior only where it ran in the run's eager mode;
    a profile of another GPU or TP is refused."""
    from workbench.contracts.cluster import Cluster
    from workbench.contracts.engine_identity import EngineIdentity
    from workbench.runlog.priors import engine_profile_priors

    db = load_profile("h100-qwen2.5-7b-tp1")
    slow = {f: getattr(db.decode, f) * 1.3 for f in ("per_seq_s", "weights_s",
                                                     "compute_s_per_token", "kv_s_per_token")}
    measured = replace(db, name="sweep", decode=replace(db.decode, overhead_s=0.009, **slow),
                       cluster=Cluster("qwen2.5-7b", "h100", 1, "vllm"))
    shape = SimpleNamespace(gpu="h100", tp=1, max_batch=256)
    eager = SimpleNamespace(enforce_eager=True)
    out = engine_profile_priors(PRIORS, measured, db, shape, eager, 600.0)
    assert out["decode_speed"].median == pytest.approx(1.3, rel=1e-3)
    assert out["decode_speed"].log_sd == 0.1 and "sweep" in out["decode_speed"].why
    assert out["step_overhead_s"] == PRIORS["step_overhead_s"]  # its eager mode not recorded
    # `tlt engine-sweep`'s profile records the engine it measured: an eager one here
    swept = replace(measured, engine=EngineIdentity("vllm", "0.11.0", "NVIDIA H100 80GB HBM3", 1,
                                                    "bfloat16", False, "Qwen/Qwen2.5-7B", "eagle"))
    out = engine_profile_priors(PRIORS, swept, db, shape, eager, 600.0)
    assert out["step_overhead_s"].median == pytest.approx(0.009)
    assert out["step_overhead_s"].log_sd == 0.3
    with pytest.raises(ConfigError, match="cluster.tp"):
        engine_profile_priors(PRIORS, measured, db, replace_ns(shape, tp=2), eager, 600.0)


def replace_ns(ns: SimpleNamespace, **changes) -> SimpleNamespace:
    return SimpleNamespace(**{**vars(ns), **changes})
