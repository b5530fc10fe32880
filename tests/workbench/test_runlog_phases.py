"""The whole RL step priced phase by phase: each phase's model recovered from a small log whose
phases are known, micro-batches and offload moving the update as the config says, a cap change
predicted from a two-cap calibration, the rollout's closed form against the simulator, and the
extracted metrics and transfer table built from the shipped logs.

The synthetic logs are veRL console logs whose timings come from the phase model itself at known
factors (a 1% scatter on top), on the measured database's costs for Qwen2.5-0.5B."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from sim.simulator import simulate
from workbench.contracts.policy import load_policy
from workbench.runlog import calibrate as cal
from workbench.runlog import engine
from workbench.runlog.extract import Provenance, extract
from workbench.contracts.training_shape import ModelShape, PhaseShape, TrainingShape
from workbench.runlog.forward_costs import BATCHES, LENGTHS, ForwardGrid
from workbench.runlog.phases import BASES, phase_bases
from workbench.runlog.prepared import prepare
from workbench.runlog.priors import TRAIN
from workbench.runlog.reader import read_run_log
from workbench.runlog.rollout_work import step_work
from workbench.runlog.shape import ShapeFlags
from workbench.runlog.transfer import predict_with
from workbench.runlog.transfer_table import build, load_manifest, table_lines

STEPS, FIT = 50, 30
# the true multiples of each factor's prior median (FACTORS' order)
TRUE = np.log([1.3, 1.5, 2.0, 1.2, 1.6, 1.4, 0.7, 1.5, 0.8])


@pytest.fixture(autouse=True)
def _profile_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "phases-cache"))


def _command(cap: int, **extra: object) -> str:
    over = {"data.train_batch_size": 32, "data.max_prompt_length": 128,
            "data.max_response_length": cap, "actor_rollout_ref.model.path": "Qwen/Qwen2.5-0.5B",
            "actor_rollout_ref.model.use_remove_padding": True,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 16,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 16,
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 8,
            "actor_rollout_ref.ref.fsdp_config.param_offload": True,
            "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
            "actor_rollout_ref.rollout.n": 4, "actor_rollout_ref.rollout.name": "vllm",
            "actor_rollout_ref.rollout.enforce_eager": True,
            "critic.model.path": "Qwen/Qwen2.5-0.5B", "critic.ppo_micro_batch_size_per_gpu": 8,
            "trainer.n_gpus_per_node": 2, "trainer.nnodes": 1, **extra}
    return "python3 -m verl.trainer.main_ppo " + " ".join(f"{k}={v}" for k, v in over.items())


PHASES = ("gen", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor")


def _write(path, cap: int, times: dict[str, np.ndarray] | None = None, **extra) -> None:
    """A log of STEPS steps at response cap `cap`: lengths moving from step to step, the phases'
    times given (1 s each where not)."""
    rng = np.random.default_rng(cap)
    lines = [_command(cap, **extra)]
    for i in range(STEPS):
        mean = cap * rng.uniform(0.3, 0.5)
        top = cap if i % 3 else int(cap * 0.8)
        values = {f"timing_s/{p}": (times[p][i] if times else 1.0) for p in PHASES}
        values["timing_s/step"] = sum(values.values())
        values.update({"response_length/mean": round(mean, 3), "response_length/max": top,
                       "response_length/min": 5, "response_length/clip_ratio": 0.0,
                       "prompt_length/mean": round(float(rng.uniform(60, 90)), 3)})
        lines.append(f"step:{i + 1} - " + " - ".join(f"{k}:{v}" for k, v in values.items()))
    path.write_text("\n".join(lines) + "\n")


def _known(tmp_path, cap: int, name: str, **extra):
    """A log whose phases are the model's at TRUE (1% scatter); its Prepared."""
    blank = tmp_path / f"{name}-blank.log"
    _write(blank, cap, **extra)
    p = prepare(blank, ShapeFlags(gpu="h100"))
    pred = engine.predict(p.work, p.priors.medians * np.exp(TRUE))
    rng = np.random.default_rng(7)
    times = {ph: pred.of(ph) * np.exp(rng.normal(0, 0.01, STEPS)) for ph in PHASES}
    path = tmp_path / f"{name}.log"
    _write(path, cap, times, **extra)
    return path


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    d = tmp_path_factory.mktemp("phases")
    return {cap: _known(d, cap, f"cap{cap}") for cap in (128, 256, 512)}


def test_each_phase_s_model_recovers_a_log_whose_phases_are_known(known):
    """Fitted on the first 30 steps, every phase of the last 20 within 3% (median), and the
    factors the phases identify come back near the ones that made the log."""
    p = prepare(known[256], ShapeFlags(gpu="h100"), fit_steps=FIT)
    assert p.training.dp == 2 and p.training.model("ref").param_offload == "forward"
    c = cal.calibrate(p, FIT, "known")
    held = dict(c.heldout.phases)
    assert set(held) == set(PHASES)
    for name, e in held.items():
        assert e.median < 3.0, (name, e.median)
    assert c.heldout.step.median < 2.0
    got = c.posterior.z
    for j in TRAIN:
        if c.posterior.status(j) == "identified":
            assert got[j] == pytest.approx(TRUE[j], abs=0.25), j


def test_micro_batches_and_offload_move_the_update_as_the_config_says(tmp_path):
    """At the same factors: micro-batches four times as large pay a quarter of the launches and
    the all-gathers; a reference offloaded per forward moves its bf16 shard in for each of its
    micro-batches over the host link; the phases they do not touch do not move."""
    base, big, off = (tmp_path / f"{n}.log" for n in ("base", "big", "off"))
    _write(base, 256)
    _write(big, 256, **{"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 16})
    _write(off, 256, **{"actor_rollout_ref.ref.fsdp_config.param_offload": False})
    a, b, o = (prepare(x, ShapeFlags(gpu="h100")) for x in (base, big, off))
    va = a.priors.medians * np.exp(TRUE)
    pa, pb, po = (engine.predict(x.work, va) for x in (a, b, o))
    launch, gather = (list(BASES).index(n) for n in ("launch", "gather"))
    ua, ub = a.work.bases.of("update_actor"), b.work.bases.of("update_actor")
    # 32 x 4 responses over 2 ranks: 16 micro-batches of 4, then 4 of 16
    np.testing.assert_allclose(ub[:, launch], ua[:, launch] / 4)
    np.testing.assert_allclose(ub[:, gather], ua[:, gather] / 4)
    assert np.all(pb.of("update_actor") < pa.of("update_actor"))
    np.testing.assert_allclose(pb.of("update_critic"), pa.of("update_critic"))
    # the reference's 8 micro-batches of 8 each copy in half of 0.49B bf16 weights
    moved = pa.of("ref") - po.of("ref")
    per_gb = va[list(TRAIN)][list(BASES).index("offload")]
    params = 494_032_768  # Qwen2.5-0.5B with tied embeddings
    np.testing.assert_allclose(moved, 8 * params / 2 * 2 / 1e9 * per_gb, rtol=1e-3)
    np.testing.assert_allclose(po.of("values"), pa.of("values"))


def test_a_cap_change_is_predicted_from_a_two_cap_calibration(known):
    """Calibrated on the logs at caps 128 and 256 together, the run at cap 512 (its engine steps,
    its tokens and its padded-free micro-batches all move) is predicted within 3%, rollout and
    step, and inside its intervals."""
    fitted = [prepare(known[c], ShapeFlags(gpu="h100"), fit_steps=FIT) for c in (128, 256)]
    c = cal.calibrate(fitted[0], FIT, "two-caps", fitted[1:])
    target = prepare(known[512], ShapeFlags(gpu="h100"))
    res = predict_with(c.profile.run_factors, ("cap128", "cap256"), target, model_error=0.05)
    assert res.gen.median < 3.0 and res.step.median < 3.0
    assert res.coverage.gen.median_inside and res.coverage.step.median_inside


def test_the_rollout_s_closed_form_is_the_simulator_s(known):
    """With the batch cap above and below each engine's share (queued admissions), the closed
    form's seconds and engine steps per engine equal the simulation's."""
    p = prepare(known[128], ShapeFlags(gpu="h100"))
    for cap in (1024, 20):
        shape = replace(p.shape, max_batch=cap)
        wl = engine.run_workload(shape, p.lengths, "run", p.database.name)
        for i in (0, 7):
            x, prompt = p.lengths.lengths[i], int(p.lengths.prompt_tokens[i])
            run = simulate(replace(wl, prompt_tokens=prompt), load_policy("baseline"),
                           p.database, steps=1, replay=[x])
            dec = run.timeline[run.timeline["state"] == "decode"]
            seconds = (dec["end_s"] - dec["start_s"]).groupby(dec["worker"]).sum()
            passes = (dec["passes"] / dec["batch"]).groupby(dec["worker"]).sum()
            got, steps = step_work(p.database.decode, x, prompt, shape.engines, cap)
            np.testing.assert_allclose(got, seconds.to_numpy(), rtol=1e-9)
            np.testing.assert_allclose(steps, passes.to_numpy(), rtol=1e-9)


def test_an_extract_reads_as_its_log(tmp_path, known):
    log = read_run_log(known[128])
    out = tmp_path / "x.metrics.json"
    doc = extract(known[128], Provenance("someone/logs", "abc123", "runs/x.log"), out)
    back = read_run_log(out)
    assert back.kind == "extract" and "someone/logs abc123 runs/x.log" in back.source
    assert back.command == log.command and back.config == log.config
    np.testing.assert_array_equal(back.column("timing_s/gen"), log.column("timing_s/gen"))
    assert len(doc["source"]["sha256"]) == 64
    bad = tmp_path / "bad.metrics.json"
    bad.write_text(json.dumps({"schema": "tlt-runlog-metrics/1", "steps": {}}))
    with pytest.raises(Exception, match="bad.metrics.json"):
        read_run_log(bad)


def test_the_transfer_table_is_regenerated_from_the_shipped_metrics(repo_root, tmp_path):
    """The two shipped Qwen2.5-0.5B logs (one recipe at two caps): each calibrated on its own
    first steps and predicting the other, from their extracted metrics alone."""
    src = repo_root / "traces" / "published" / "verl-runs"
    doc = json.loads((src / "transfer.json").read_text())
    keep = [e for e in doc["logs"] if e["file"].startswith("Qwen2.5-0.5B")]
    for e in keep:
        (tmp_path / e["file"]).write_bytes((src / e["file"]).read_bytes())
        e["fit_steps"] = 40
    (tmp_path / "m.json").write_text(json.dumps({"logs": keep}))
    table = build(load_manifest(tmp_path / "m.json"), seeds=0)
    assert len(table.own) == 2 and [r.kind for r in table.pairs] == ["change", "change"]
    for r in table.own:
        assert r.heldout.step.median < 5.0 and r.coverage is not None and r.tlt is None
    lines = "\n".join(table_lines(table))
    assert "| `Qwen2.5-0.5B-bsz256_2-prompt512-resp256-0.538.metrics.json` |" in lines
    assert "Model error under a change of run" in lines
    assert 0 < table.model_error < 1


def _grid(value_head: bool = False) -> ForwardGrid:
    """A database of one microsecond a token, whatever the micro-batch."""
    seconds = tuple(tuple(1e-6 * b * n for n in LENGTHS) for b in BATCHES)
    return ForwardGrid("qwen2.5-0.5b", "h100", 1, value_head, seconds, 3e12, 151936)


def test_lora_and_megatron_price_the_update_as_their_physics():
    """LoRA's backward computes no weight gradients (3 forwards with checkpointing, not 4) and its
    optimizer steps only its adapters; Megatron gathers no weights, runs a pipeline's
    (micro-batches + pp - 1) stage times over its data-parallel ranks and reads each rank's share
    of the vocabulary (its LM head split over TP)."""
    actor = ModelShape("actor", "qwen2.5-0.5b", checkpointing=True, param_bytes=4)
    upd = PhaseShape("update_actor", "actor", micro_batch=4, update=True, mini_batches=2)
    fsdp = TrainingShape("fsdp", 8, (actor,), (upd,))
    length = np.array([512.0])
    launch, gather = (list(BASES).index(n) for n in ("launch", "gather"))
    a = phase_bases(fsdp, upd, _grid(), length, 64)  # 8 sequences a rank: 2 micro-batches
    assert a[0, launch] == 2 * 4 * 24
    params = 494_032_768
    assert a[0, gather] == pytest.approx(2 * 4 * 2 * params * 7 / 8 / 1e9)
    lora = replace(fsdp, models=(replace(actor, lora_rank=32),))
    b = phase_bases(lora, upd, _grid(), length, 64)
    assert b[0, launch] == 2 * 3 * 24 and b[0, 0] < a[0, 0]
    meg = replace(fsdp, strategy="megatron", tp=2, pp=2)  # 2 ranks of 32 sequences: 8 of 4
    c = phase_bases(meg, upd, _grid(), length, 64)
    assert c[0, gather] == 0.0 and c[0, launch] == 8 * 4 * 24 / 2
    forward = 4 * 512 * 1e-6  # a micro-batch's forward on the grid
    logits = 32 * 512 * 151936 / 2 * 96 / 3e12
    optimizer = 2 * params / 2 * 28 / 3e12
    assert c[0, 0] == pytest.approx(4 * forward / 2 * (8 + 1) + logits + optimizer, rel=1e-6)
