"""Our own tiny reasoning model: a small Qwen2, trained (SFT) on `real.tiny.task` in minutes on a
CPU.

No weights can be downloaded here, so the real backend runs on a model the project builds
itself: `init_model(out_dir, seed)` (the CLI: `tlt model init --out DIR --seed S`) makes a
~1M-parameter Qwen2 (hidden 128, 4 layers, 4 heads, 2 KV heads, MLP 512, 2,048 positions,
untied LM head) with the character tokenizer of `real.tiny.tokenizer`, trains it by supervised
fine-tuning on the GCD task's step-by-step solutions (loss on the response and the end of
sequence only, never on the prompt), evaluates its greedy answers on held-out problems, and
saves it in Hugging Face format (safetensors, float32) that `transformers` and vLLM load.

Determinism: the same seed, step count, mix, thread count and torch build give a
byte-identical `model.safetensors` (torch's deterministic algorithms, fixed threads, batches
and their order drawn from the seed).

`load_model_dir(path)` checks that any directory given as `--model` is a Hugging Face
causal-LM directory (our own or any other) before an engine is started on it.

Why the defaults (`DEFAULT_STEPS` = 1,200 steps of 4,096 tokens, three-digit numbers): trained
too briefly the model learns to stop at once and its responses lose the long tail; on two-digit
numbers it ends up doing the arithmetic perfectly, so RL has nothing to improve. Three-digit
numbers (too many pairs to memorise) leave a slip rate per step: some answers are wrong, and the
wrong ones run longer.
`--threads 1` trains more robustly on a busy machine (two threads share two cores badly with any
other process), with other weights. The shipped model's figures: docs/results.md.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from real.tiny import task
from real.tiny.generation import EVAL_PROBLEMS, evaluate
from real.tiny.tokenizer import BOS_ID, EOS_ID, PAD_ID, build_tokenizer, save_tokenizer, vocab_size
from real.torch_utils import torch_settings

# The model's shape (the issue fixes it; ~1.0M parameters).
ARCH = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=512, max_position_embeddings=2048, tie_word_embeddings=False)

# Training defaults, chosen by measurement (the module docstring has the figures).
DEFAULT_STEPS = 1200
DEFAULT_MIX = "default"
DEFAULT_LR = 3e-3
TOKENS_PER_BATCH = 4096       # tokens per optimiser step, padding included
THREADS = 2


@dataclass(frozen=True)
class SFTConfig:
    seed: int = 0
    steps: int = DEFAULT_STEPS
    mix: str = DEFAULT_MIX
    lr: float = DEFAULT_LR
    warmup_frac: float = 0.05
    min_lr_frac: float = 0.1
    weight_decay: float = 0.01
    tokens_per_batch: int = TOKENS_PER_BATCH
    threads: int = THREADS
    variant: str = "gcd"  # real.tiny.task.VARIANTS: which solution styles SFT teaches


def qwen2_config(**overrides):
    from transformers import Qwen2Config

    kw = dict(
        ARCH,
        vocab_size=vocab_size(),
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        rope_theta=10000.0,
        attention_dropout=0.0,
        use_cache=True,
    )
    kw.update(overrides)
    cfg = Qwen2Config(**kw)
    cfg.dtype = "float32"
    return cfg


def encode(tok, problem: task.Problem) -> tuple[list[int], int]:
    """Token ids of prompt + solution + </s>, and the prompt's length (masked from the loss)."""
    p = tok(problem.prompt, add_special_tokens=False)["input_ids"]
    s = tok(problem.solution, add_special_tokens=False)["input_ids"]
    return p + s + [EOS_ID], len(p)


def make_batches(
    seqs: list[tuple[list[int], int]], tokens_per_batch: int, rng: random.Random
) -> list[list[int]]:
    """Group sequences of similar length (indices into `seqs`) so that padded batches hold at
    most `tokens_per_batch` tokens, then shuffle the batches' order."""
    order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i][0]), i))
    batches, cur, longest = [], [], 0
    for i in order:
        n = len(seqs[i][0])
        if cur and max(longest, n) * (len(cur) + 1) > tokens_per_batch:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def training_batches(tok, cfg: SFTConfig) -> list[tuple[list[list[int]], list[int]]]:
    """Exactly `cfg.steps` batches of (sequences, prompt lengths), from training-split problems."""
    rng = random.Random(f"sft-batches/{cfg.seed}")
    out: list = []
    round_ = 0
    # Expected tokens per sequence: prompt, one line per step, answer line, </s>.
    digits = "0" * task.WIDTH
    line = sum(share * len(task.LINE_FORMATS[style].format(x=digits, y=digits, z=digits))
               for style, share in task.variant(cfg.variant).styles)
    mean_len = 20 + line * sum(s * p for s, p in task.difficulty_pmf(cfg.mix).items()) + 8
    while len(out) < cfg.steps:
        # Enough problems for the remaining steps (padding wastes some of each batch).
        need = int((cfg.steps - len(out)) * cfg.tokens_per_batch / mean_len * 0.9) + 64
        probs = task.make_problems(need, seed=cfg.seed * 1000 + round_, mix=cfg.mix, split="train",
                                   variant_name=cfg.variant)
        seqs = [encode(tok, p) for p in probs]
        for b in make_batches(seqs, cfg.tokens_per_batch, rng):
            out.append(([seqs[i][0] for i in b], [seqs[i][1] for i in b]))
        round_ += 1
    return out[:cfg.steps]


def _collate(batch, torch):
    seqs, plens = batch
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), PAD_ID, dtype=torch.long)
    labels = torch.full((len(seqs), T), -100, dtype=torch.long)
    for r, (s, pl) in enumerate(zip(seqs, plens)):
        ids[r, :len(s)] = torch.tensor(s)
        labels[r, pl:len(s)] = torch.tensor(s[pl:])
    return ids, labels


def _lr_at(step: int, cfg: SFTConfig) -> float:
    warm = max(1, int(cfg.steps * cfg.warmup_frac))
    if step < warm:
        return cfg.lr * (step + 1) / warm
    t = (step - warm) / max(1, cfg.steps - warm)
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


def sft(model, tok, cfg: SFTConfig, log: Callable[[str], None] = print) -> dict:
    """SFT `model` in place; returns {'final_loss', 'train_seconds', 'loss_tokens', 'losses'}.

    Call it inside `torch_settings` (as `init_model` does) for a deterministic result."""
    import torch

    batches = training_batches(tok, cfg)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        betas=(0.9, 0.98),
        eps=1e-8,
    )
    model.train()
    t0 = time.perf_counter()
    losses, tokens, ema = [], 0, None
    every = max(1, cfg.steps // 20)
    for step, batch in enumerate(batches):
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, cfg)
        ids, labels = _collate(batch, torch)
        out = model(input_ids=ids, labels=labels)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = float(out.loss.detach())
        losses.append(loss)
        tokens += int((labels != -100).sum())
        ema = loss if ema is None else 0.9 * ema + 0.1 * loss
        if step % every == 0 or step == cfg.steps - 1:
            log(
                f"step {step + 1}/{cfg.steps}  loss {loss:.4f} (ema {ema:.4f})  lr "
                f"{_lr_at(step, cfg):.2e}  {time.perf_counter() - t0:.1f}s"
            )
    model.eval()
    tail = losses[-max(1, min(20, len(losses))):]
    return {"final_loss": sum(tail) / len(tail), "train_seconds": time.perf_counter() - t0,
            "loss_tokens": tokens, "losses": losses}


def init_model(out_dir: str | Path, seed: int = 0, steps: int = DEFAULT_STEPS,
               mix: str = DEFAULT_MIX, lr: float = DEFAULT_LR, evaluate_after: bool = True,
               eval_problems: int = EVAL_PROBLEMS, log: Callable[[str], None] = print,
               minutes_budget: Optional[float] = 10.0, tokens_per_batch: int = TOKENS_PER_BATCH,
               threads: int = THREADS, variant_name: str = "gcd") -> dict:
    """Build, train and save the tiny reasoning model in `out_dir`; returns training.json's content.

    The number of steps is fixed (not a time budget) so that the result is deterministic;
    `minutes_budget` only warns when training took longer than that.
    """
    if mix not in task.MIXES:
        raise ValueError(f"mix {mix!r}: allowed: {', '.join(task.MIXES)}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    task.variant(variant_name)
    cfg = SFTConfig(seed=seed, steps=steps, mix=mix, lr=lr, tokens_per_batch=tokens_per_batch,
                    threads=threads, variant=variant_name)
    from transformers import Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    with torch_settings(cfg.threads) as torch:
        tok = build_tokenizer()
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(qwen2_config())
        params = sum(p.numel() for p in model.parameters())
        log(f"model: Qwen2, {params:,} parameters; SFT {steps} steps of {cfg.tokens_per_batch} "
            f"tokens, mix {mix}, task variant {variant_name}, seed {seed}, {cfg.threads} threads")
        result = sft(model, tok, cfg, log=log)
        info = {
            "seed": seed,
            "steps": steps,
            "mix": mix,
            "lr": lr,
            "tokens_per_batch": cfg.tokens_per_batch,
            "threads": cfg.threads,
            "parameters": params,
            "architecture": dict(ARCH),
            "task": "gcd by repeated subtraction (real/tiny/task.py)",
            "variant": variant_name,
            "final_loss": round(result["final_loss"], 5),
            "train_seconds": round(result["train_seconds"], 1),
            "loss_tokens": result["loss_tokens"],
            "torch": torch.__version__,
        }
        if minutes_budget is not None and result["train_seconds"] > minutes_budget * 60:
            log(f"warning: training took {result['train_seconds'] / 60:.1f} min, over the "
                f"{minutes_budget} min budget")
        model.generation_config.bos_token_id = BOS_ID
        model.generation_config.eos_token_id = EOS_ID
        model.generation_config.pad_token_id = PAD_ID
        model.save_pretrained(str(out), safe_serialization=True)
        save_tokenizer(tok, out)
        if evaluate_after:  # after saving: evaluation does not change the weights
            log(f"evaluating greedy answers on {eval_problems} held-out problems (mix {mix}) ...")
            # The same held-out problems whatever the seed, so that models compare.
            info["eval"] = evaluate(model, tok, n=eval_problems, seed=0, mix=mix,
                                    variant_name=variant_name)
            e = info["eval"]
            log(f"accuracy {e['accuracy']:.2f}; response tokens p50 "
                f"{e['response_tokens']['p50']:.0f} p90 {e['response_tokens']['p90']:.0f} max "
                f"{e['response_tokens']['max']} ({e['eval_seconds']}s)")
    info["total_seconds"] = round(time.perf_counter() - t_start, 1)
    (out / "training.json").write_text(json.dumps(info, indent=2) + "\n")
    (out / "README.md").write_text(model_card(info))
    return info


def model_card(info: dict) -> str:
    """A short README.md for the saved directory: what it is, how it was made, how it did."""
    lines = [
        "# Tiny GCD reasoning model (TLT Workbench)",
        "",
        f"A {info['parameters']:,}-parameter Qwen2 (hidden {ARCH['hidden_size']}, "
        f"{ARCH['num_hidden_layers']} layers, {ARCH['num_attention_heads']} heads, "
        f"{ARCH['num_key_value_heads']} KV heads, MLP {ARCH['intermediate_size']}, untied LM head, "
        "float32) with a one-token-per-character tokenizer, trained by SFT on the "
        "GCD-by-subtraction task of `real/tiny/task.py`. Built by:",
        "",
        f"    tlt model init --out DIR --seed {info['seed']} --steps {info['steps']} --mix "
        f"{info['mix']}"
        + (f" --variant {info['variant']}" if info.get("variant", "gcd") != "gcd" else ""),
        "",
        f"SFT: {info['steps']} steps of {info['tokens_per_batch']} tokens, AdamW, peak lr "
        f"{info['lr']}, {info['threads']} threads, {info['train_seconds']:.0f} s; final loss "
        f"{info['final_loss']:.4f} (torch {info['torch']}). Same seed, steps, mix, thread count "
        "and torch build: same weights, byte for byte.",
    ]
    e = info.get("eval")
    if e:
        r = e["response_tokens"]
        bands = ", ".join(
            f"{k} steps {v['accuracy']:.2f} (n={v['n']})"
            for k, v in e["accuracy_by_difficulty"].items()
        )
        lines += [
            "",
            f"Greedy on {e['problems']} held-out problems (mix {e['mix']}): accuracy "
            f"{e['accuracy']:.2f} ({bands}); response tokens p50 {r['p50']:.0f}, p90 "
            f"{r['p90']:.0f}, max {r['max']} (reference solutions: p50 "
            f"{e['reference_tokens']['p50']:.0f}, p90 {e['reference_tokens']['p90']:.0f}, max "
            f"{e['reference_tokens']['max']}).",
        ]
    lines += [
        "",
        "`training.json` holds these figures. Load with `transformers.AutoModelForCausalLM` / "
        '`AutoTokenizer` or `vllm.LLM(model=DIR, dtype="float32")`.',
        "",
    ]
    return "\n".join(lines)


def variant_of(model_dir: str | Path) -> str:
    """The task variant a model was trained for (its training.json's `variant`): the reward
    its RL runs use. `gcd` for models without one (older builds, models not built here)."""
    info = Path(model_dir) / "training.json"
    if not info.is_file():
        return "gcd"
    try:
        name = json.loads(info.read_text()).get("variant", "gcd")
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{info}: not valid JSON ({exc}); rebuild the model with `tlt model init`"
        ) from None
    try:
        task.variant(name)
    except ValueError as exc:
        raise ValueError(f"{info}: field 'variant': {exc}") from None
    return name


def load_model_dir(path: str | Path) -> Path:
    """Check that `path` is a Hugging Face causal-LM directory; return it as a Path.

    Raises FileNotFoundError / ValueError naming the path and the fix.
    """
    p = Path(path)
    fix = ("give a Hugging Face model directory (config.json, weights, tokenizer files), "
           "or build our tiny model with `tlt model init --out DIR --seed 0`")
    if not p.is_dir():
        raise FileNotFoundError(f"--model {p}: no such directory; {fix}")
    cfg = p / "config.json"
    if not cfg.is_file():
        raise FileNotFoundError(f"--model {p}: no config.json in it; {fix}")
    try:
        data = json.loads(cfg.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"--model {p}: config.json is not valid JSON ({exc}); {fix}") from None
    archs = data.get("architectures")
    if archs is not None and not any(
        str(a).endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for a in archs
    ):
        raise ValueError(
            f"--model {p}: config.json's architectures {archs} name no causal-LM class "
            f"(*ForCausalLM); {fix}"
        )
    weights = [
        f
        for pat in ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")
        for f in p.glob(pat)
    ]
    if not weights:
        raise FileNotFoundError(f"--model {p}: no weights (*.safetensors or *.bin) in it; {fix}")
    if not any(
        (p / f).is_file()
        for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    ):
        raise FileNotFoundError(f"--model {p}: no tokenizer files in it; {fix}")
    return p


__all__ = ["init_model", "load_model_dir", "variant_of", "qwen2_config", "sft", "SFTConfig"]
