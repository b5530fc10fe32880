"""The EAGLE drafter: a torch module, its loss, its training, and checkpoints vLLM loads.

Architecture (what vLLM's `EagleLlamaForCausalLM` runs, so a checkpoint saved here loads there):

    x   = fc(concat(embed(token[t+1]), h[t]))        # fc: 2H -> H, no bias; embedding first
    y   = x + attn(x)                                # one Llama decoder layer, no input norm
    out = y + mlp(post_attention_layernorm(y))       # no final norm
    logits = lm_head(out)                            # the target's LM head

`h[t]` is the target's hidden state at position t after its final norm: what vLLM hands the
drafter, and in `transformers` both `model.model(...).last_hidden_state` and
`output_hidden_states=True`'s `hidden_states[-1]` (checked for Qwen2 under transformers 5:
the last entry is the normed output, equal to `last_hidden_state`; `lm_head` of it gives the
logits). The drafter at position t reads the token at t+1 and predicts `h[t+1]`, hence the token
at t+2; it runs at RoPE position t, as vLLM's proposer does. The embedding and the LM head are the
target's, shared and frozen; only `fc` and the layer train.

The loss is EAGLE's: `reg_weight * smooth_l1(out[t], h[t+1]) + ce_weight * CE(logits[t],
softmax(target_logits[t+1]))`, the second a cross-entropy against the target's full next-token
distribution (KL plus a constant). Defaults: reg_weight 1.0, ce_weight 0.1 (the EAGLE paper's).

The checkpoint (`save_drafter`) is a directory with `config.json` (a `LlamaConfig`,
`architectures: ["EagleLlamaForCausalLM"]`, one layer, the target's sizes), `model.safetensors`
with exactly `fc.weight`, `layers.0.self_attn.{q,k,v,o}_proj.weight`,
`layers.0.mlp.{gate,up,down}_proj.weight` and `layers.0.post_attention_layernorm.weight` (no
`input_layernorm`: vLLM refuses it; no embedding or LM head: vLLM shares the target's), and
`tlt_drafter.json` (how it was trained).
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from workbench.contracts.fileio import write_dir_atomic

REG_WEIGHT = 1.0  # hidden-state regression (smooth L1), as EAGLE
CE_WEIGHT = 0.1  # token cross-entropy against the target's distribution, as EAGLE
ARCHITECTURE = "EagleLlamaForCausalLM"
EXTRA_FILE = "tlt_drafter.json"


# ---------------------------------------------------------------- config


def _rope_theta(cfg: Any) -> float:
    params = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if isinstance(params, dict) and params.get("rope_type", params.get("type", "default")) not in ("default", None):
        raise NotImplementedError(f"target RoPE type {params.get('rope_type')!r}: the drafter implements default RoPE only")
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    return float(theta if theta is not None else getattr(cfg, "rope_theta", 10000.0))


@dataclass(frozen=True)
class DrafterConfig:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    initializer_range: float = 0.02

    @classmethod
    def from_target_config(cls, cfg: Any) -> "DrafterConfig":
        """From a `transformers` config of a Llama-like target (Qwen2, Llama, ...)."""
        text = getattr(cfg, "text_config", None) or cfg
        h, nh = int(text.hidden_size), int(text.num_attention_heads)
        return cls(hidden_size=h, intermediate_size=int(text.intermediate_size), num_attention_heads=nh,
                   num_key_value_heads=int(getattr(text, "num_key_value_heads", None) or nh),
                   head_dim=int(getattr(text, "head_dim", None) or h // nh), vocab_size=int(text.vocab_size),
                   rms_norm_eps=float(getattr(text, "rms_norm_eps", 1e-6)), rope_theta=_rope_theta(text),
                   max_position_embeddings=int(getattr(text, "max_position_embeddings", 2048)),
                   initializer_range=float(getattr(text, "initializer_range", 0.02)))

    def to_llama_config(self, target_cfg: Any = None):
        from transformers import LlamaConfig

        extra = {}
        for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if target_cfg is not None and getattr(target_cfg, k, None) is not None:
                extra[k] = getattr(target_cfg, k)
        cfg = LlamaConfig(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                          intermediate_size=self.intermediate_size, num_hidden_layers=1,
                          num_attention_heads=self.num_attention_heads, num_key_value_heads=self.num_key_value_heads,
                          head_dim=self.head_dim, max_position_embeddings=self.max_position_embeddings,
                          rms_norm_eps=self.rms_norm_eps, rope_theta=self.rope_theta, attention_bias=False,
                          mlp_bias=False, hidden_act="silu", tie_word_embeddings=False,
                          initializer_range=self.initializer_range, **extra)
        cfg.architectures = [ARCHITECTURE]
        import transformers

        if int(transformers.__version__.split(".")[0]) >= 5:
            cfg.dtype = "float32"
        else:  # pragma: no cover - transformers 4 names it torch_dtype
            cfg.torch_dtype = "float32"
        return cfg


# ---------------------------------------------------------------- the module


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, cfg.hidden_size, bias=False)
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, self.hd, 2, dtype=torch.float32) / self.hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        freqs = positions.to(torch.float32)[..., None] * self.inv_freq  # [b, t, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # neox-style RoPE, as vLLM's Llama
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        if self.nkv != self.nh:
            k = k.repeat_interleave(self.nh // self.nkv, dim=1)
            v = v.repeat_interleave(self.nh // self.nkv, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """A Llama decoder layer without its input norm (EAGLE's first layer)."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        y = x + self.self_attn(x, positions)
        return y + self.mlp(self.post_attention_layernorm(y))


class EagleDrafter(nn.Module):
    """One decoder layer on `fc(concat(embedding, target hidden))`; the target's embedding and LM head."""

    SHARED = ("embed_tokens", "lm_head")

    def __init__(self, cfg: DrafterConfig, embed_tokens: nn.Module | None = None, lm_head: nn.Module | None = None):
        super().__init__()
        self.config = cfg
        self.embed_tokens = embed_tokens if embed_tokens is not None else nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.lm_head = lm_head if lm_head is not None else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        for m in (self.embed_tokens, self.lm_head):
            m.requires_grad_(False)
        self.fc = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.layers = nn.ModuleList([DecoderLayer(cfg)])
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for name, p in self.named_parameters():
            if name.split(".")[0] in self.SHARED:
                continue
            if name.endswith("layernorm.weight"):
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, std=self.config.initializer_range)

    @classmethod
    def from_target(cls, target_model: nn.Module) -> "EagleDrafter":
        """A fresh drafter sharing (and freezing) the target's embedding and LM head."""
        cfg = DrafterConfig.from_target_config(target_model.config)
        return cls(cfg, target_model.get_input_embeddings(), target_model.get_output_embeddings())

    def forward(self, hidden: torch.Tensor, tokens: torch.Tensor,
                positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [B, T, H]: target hidden states at positions 0..T-1; tokens [B, T]: the tokens
        at positions 1..T. Returns (predicted hidden states at 1..T, logits for tokens at 2..T+1).
        Sequences are right-padded (attention is causal, so padding never reaches real positions)."""
        x = self.predict_hidden(hidden, tokens, positions)
        return x, self.lm_head(x)

    def predict_hidden(self, hidden: torch.Tensor, tokens: torch.Tensor,
                       positions: torch.Tensor | None = None) -> torch.Tensor:
        """`forward` without the LM head: the predicted hidden states only (apply `lm_head` to
        the positions you need; over a large vocabulary the full logits are the costly part)."""
        b, t = tokens.shape
        if positions is None:
            positions = torch.arange(t, device=tokens.device).expand(b, t)
        emb = self.embed_tokens(tokens).to(hidden.dtype)
        x = self.fc(torch.cat((emb, hidden), dim=-1))
        for layer in self.layers:
            x = layer(x, positions)
        return x

    def load_drafter_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load weights named as `drafter_state_dict` gives them (the shared ones stay)."""
        own = self.drafter_state_dict()
        if set(state) != set(own):
            raise ValueError(f"not a drafter state of this shape: missing {sorted(set(own) - set(state))}, "
                             f"unexpected {sorted(set(state) - set(own))}")
        self.load_state_dict({**self.state_dict(), **state})

    def drafter_state_dict(self) -> dict[str, torch.Tensor]:
        """The trained weights, named as vLLM's EagleLlamaForCausalLM loads them."""
        return {k: v.detach().cpu().contiguous().clone() for k, v in self.state_dict().items()
                if k.split(".")[0] not in self.SHARED}


# ---------------------------------------------------------------- loss and target features


def eagle_loss(pred_hidden: torch.Tensor, pred_logits: torch.Tensor, target_hidden: torch.Tensor,
               target_logits: torch.Tensor, mask: torch.Tensor | None = None,
               reg_weight: float = REG_WEIGHT, ce_weight: float = CE_WEIGHT) -> tuple[torch.Tensor, dict[str, float]]:
    """EAGLE's loss over positions where `mask` is true: smooth-L1 on the hidden state plus
    cross-entropy against the target's next-token distribution. Also returns its parts and
    the top-1 agreement of drafter and target (what greedy acceptance at position 1 tracks)."""
    if mask is None:
        mask = torch.ones(pred_hidden.shape[:-1], dtype=torch.bool, device=pred_hidden.device)
    m = mask.to(pred_hidden.dtype)
    n = m.sum().clamp_min(1.0)
    reg = (F.smooth_l1_loss(pred_hidden, target_hidden, reduction="none").mean(-1) * m).sum() / n
    p_target = F.softmax(target_logits.float(), dim=-1)
    ce = (-(p_target * F.log_softmax(pred_logits.float(), dim=-1)).sum(-1) * m).sum() / n
    loss = reg_weight * reg + ce_weight * ce
    with torch.no_grad():
        agree = ((pred_logits.argmax(-1) == target_logits.argmax(-1)).to(m.dtype) * m).sum() / n
    return loss, {"loss": loss.item(), "reg": reg.item(), "ce": ce.item(), "top1": agree.item()}


@torch.no_grad()
def target_hidden_states(model: nn.Module, input_ids: torch.Tensor,
                         attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden [B, T, H], logits [B, T, V]) of a `transformers` causal LM over `input_ids`.

    `hidden` is `hidden_states[-1]` of a forward with `output_hidden_states=True`: the output of
    the final norm (equal to `last_hidden_state`), which is what vLLM passes to EAGLE."""
    out = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
    return out.hidden_states[-1], out.logits


def load_target(model_dir: str | Path) -> nn.Module:
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    except TypeError:  # transformers < 4.56 calls it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32)
    model.eval().requires_grad_(False)
    return model


# ---------------------------------------------------------------- training


@dataclass
class TrainConfig:
    steps: int = 300
    lr: float = 1e-3
    seed: int = 0
    batch_size: int = 8
    max_len: int = 512
    reg_weight: float = REG_WEIGHT
    ce_weight: float = CE_WEIGHT
    warmup: int = 20
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    noise: float = 0.0  # uniform noise on the input hidden states, +-noise (EAGLE's augmentation)
    # torch threads while training; None: 1 for a small target (hidden <= 512), where thread
    # synchronisation costs more than it gains (measured 16x slower with 2 threads on a busy
    # 2-core machine), else torch's default.
    threads: int | None = None


def _pad(seqs: Sequence[torch.Tensor], value: float = 0) -> tuple[torch.Tensor, torch.Tensor]:
    t = max(len(s) for s in seqs)
    out = seqs[0].new_full((len(seqs), t) + tuple(seqs[0].shape[1:]), value)
    mask = torch.zeros(len(seqs), t, dtype=torch.bool)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
        mask[i, : len(s)] = True
    return out, mask


def featurize(model: nn.Module, sequences: Sequence[Sequence[int]], max_len: int = 512,
              batch_size: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(token ids [L], target hidden [L, H]) per sequence, truncated to `max_len` tokens."""
    seqs = [torch.tensor(list(s)[:max_len], dtype=torch.long) for s in sequences if len(s) >= 3]
    feats = []
    for i in range(0, len(seqs), batch_size):
        chunk = seqs[i: i + batch_size]
        ids, mask = _pad(chunk)
        hidden, _ = target_hidden_states(model, ids, mask.long())
        feats += [(s, hidden[j, : len(s)].clone()) for j, s in enumerate(chunk)]
    return feats


def train_step(drafter: EagleDrafter, opt: torch.optim.Optimizer, hidden: torch.Tensor, tokens: torch.Tensor,
               mask: torch.Tensor | None = None, cfg: TrainConfig | None = None,
               gen: torch.Generator | None = None) -> dict[str, float]:
    """One optimiser step of the EAGLE loss on a batch of target hidden states and tokens.

    hidden [B, T, H]: the target's (final-norm) hidden states over prompt + response; tokens
    [B, T]: the same positions' token ids; mask [B, T]: real (not padding) positions, padding on
    the right. The drafter reads (hidden[t], tokens[t+1]) and is trained towards hidden[t+1]
    and the target's distribution lm_head(hidden[t+1]). Returns the loss and its parts.
    """
    cfg = cfg or TrainConfig()
    if mask is None:
        mask = torch.ones(tokens.shape, dtype=torch.bool)
    inp_h = hidden[:, :-1]
    if cfg.noise > 0:
        inp_h = inp_h + (torch.rand(inp_h.shape, generator=gen) * 2 - 1) * cfg.noise
    pred_h, pred_logits = drafter(inp_h, tokens[:, 1:])
    tgt_h = hidden[:, 1:]
    with torch.no_grad():
        tgt_logits = drafter.lm_head(tgt_h)
    loss, parts = eagle_loss(pred_h, pred_logits, tgt_h, tgt_logits, mask[:, 1:] & mask[:, :-1],
                             cfg.reg_weight, cfg.ce_weight)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.grad_clip:
        torch.nn.utils.clip_grad_norm_([p for p in drafter.parameters() if p.requires_grad], cfg.grad_clip)
    opt.step()
    return parts


def train_drafter(target: str | Path | nn.Module, sequences: Sequence[Sequence[int]], steps: int = 300,
                  lr: float = 1e-3, seed: int = 0, drafter: EagleDrafter | None = None,
                  config: TrainConfig | None = None, log: Callable[[str], None] | None = print,
                  log_every: int = 50) -> EagleDrafter:
    """Train an EAGLE drafter on the target's hidden states over `sequences` (prompt + response ids).

    Deterministic for a seed (weights, batches, noise). Prints progress every `log_every` steps
    when `log` is given. The drafter's training history is left in `drafter.train_log`.
    """
    cfg = config or TrainConfig()
    cfg = TrainConfig(**{**asdict(cfg), "steps": steps, "lr": lr, "seed": seed})
    model = load_target(target) if isinstance(target, (str, Path)) else target
    threads = cfg.threads
    if threads is None and DrafterConfig.from_target_config(model.config).hidden_size <= 512:
        threads = 1
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _train(model, sequences, cfg, drafter, log, log_every)
    finally:
        torch.set_num_threads(before)


def _train(model: nn.Module, sequences: Sequence[Sequence[int]], cfg: TrainConfig, drafter: EagleDrafter | None,
           log: Callable[[str], None] | None, log_every: int) -> EagleDrafter:
    torch.manual_seed(cfg.seed)
    if drafter is None:
        drafter = EagleDrafter.from_target(model)
    feats = featurize(model, sequences, cfg.max_len, cfg.batch_size)
    if not feats:
        raise ValueError("no training sequences (each needs at least 3 tokens)")
    gen = torch.Generator().manual_seed(cfg.seed)
    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, cfg.warmup)) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, cfg.steps))))))
    drafter.train()
    history: list[dict[str, float]] = []
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        idx = torch.randint(len(feats), (min(cfg.batch_size, len(feats)),), generator=gen).tolist()
        ids, mask = _pad([feats[i][0] for i in idx])
        hid, _ = _pad([feats[i][1] for i in idx])
        parts = train_step(drafter, opt, hid, ids, mask, cfg, gen)
        sched.step()
        parts["step"] = step + 1
        history.append(parts)
        if log is not None and (step + 1 == cfg.steps or (step + 1) % log_every == 0 or step == 0):
            recent = history[-log_every:]
            mean = lambda k: sum(h[k] for h in recent) / len(recent)  # noqa: E731
            log(f"  drafter step {step + 1}/{cfg.steps}  loss {mean('loss'):.4f}  reg {mean('reg'):.4f}  "
                f"ce {mean('ce'):.3f}  top1 {mean('top1'):.3f}  ({time.perf_counter() - t0:.1f}s)")
    drafter.eval()
    drafter.train_log = history  # type: ignore[attr-defined]
    drafter.train_config = cfg  # type: ignore[attr-defined]
    drafter.train_sequences = len(feats)  # type: ignore[attr-defined]
    return drafter


# ---------------------------------------------------------------- checkpoints


def save_drafter(drafter: EagleDrafter, out_dir: str | Path, target_config: Any = None,
                 extra: dict[str, Any] | None = None) -> Path:
    """Write a checkpoint vLLM loads as EagleLlamaForCausalLM; atomically (temp dir + rename)."""
    from safetensors.torch import save_file

    out = Path(out_dir)

    def fill(tmp: Path) -> None:
        drafter.config.to_llama_config(target_config).save_pretrained(str(tmp))
        save_file(drafter.drafter_state_dict(), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        info: dict[str, Any] = {"drafter_config": asdict(drafter.config)}
        cfg = getattr(drafter, "train_config", None)
        if cfg is not None:
            info["train_config"] = asdict(cfg)
            log = getattr(drafter, "train_log", [])
            if log:
                tail = log[-min(50, len(log)):]
                info["final"] = {k: sum(h[k] for h in tail) / len(tail) for k in ("loss", "reg", "ce", "top1")}
            info["train_sequences"] = getattr(drafter, "train_sequences", None)
        info.update(extra or {})
        (tmp / EXTRA_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")

    write_dir_atomic(out, fill)
    return out


def load_drafter(drafter_dir: str | Path, target_model: nn.Module) -> EagleDrafter:
    """A saved drafter on top of the target's embedding and LM head (to train it further)."""
    from safetensors.torch import load_file

    drafter = EagleDrafter.from_target(target_model)
    state = load_file(str(Path(drafter_dir) / "model.safetensors"))
    missing, unexpected = drafter.load_state_dict(state, strict=False)
    missing = [k for k in missing if k.split(".")[0] not in EagleDrafter.SHARED]
    if missing or unexpected:
        raise ValueError(f"{drafter_dir}: not a drafter of this target (missing {missing}, unexpected {unexpected})")
    return drafter


# ---------------------------------------------------------------- training data from the target


def _problem_prompt(p: Any) -> str:
    if isinstance(p, str):
        return p
    if isinstance(p, dict):
        return str(p["prompt"])
    return str(getattr(p, "prompt"))


def task_prompts(n: int, seed: int, mix: str | None = None) -> list[str] | None:
    """Prompts from real.task.make_problems when that module exists, else None."""
    try:
        from real import task
    except ImportError:
        return None
    make = getattr(task, "make_problems", None)
    if make is None:
        return None
    problems = make(n, seed, mix) if mix is not None else make(n, seed)
    return [_problem_prompt(p) for p in problems]


def generic_prompts(model_dir: str | Path, n: int, seed: int, length: int = 8) -> list[list[int]]:
    """Random token-id prompts over the target's ordinary (non-special) vocabulary."""
    from transformers import AutoConfig, AutoTokenizer

    vocab = int(AutoConfig.from_pretrained(str(model_dir)).vocab_size)
    special: set[int] = set()
    try:
        tok = AutoTokenizer.from_pretrained(str(model_dir))
        special = set(tok.all_special_ids)
        vocab = min(vocab, len(tok))
    except Exception:  # no tokenizer: any id goes
        pass
    ids = [i for i in range(vocab) if i not in special]
    rng = random.Random(seed)
    return [[rng.choice(ids) for _ in range(length)] for _ in range(n)]


def rollout_sequences(model_dir: str | Path, prompts: Sequence[str | Sequence[int]], samples: int,
                      max_tokens: int, seed: int, temperature: float = 1.0,
                      log: Callable[[str], None] | None = print) -> list[list[int]]:
    """Prompt + response token ids from the target: per prompt one greedy response and
    `samples - 1` sampled at `temperature`, generated by vLLM (one engine, closed after), or by
    `transformers` one sequence at a time where vLLM is not installed."""
    import importlib.util

    t0 = time.perf_counter()
    if importlib.util.find_spec("vllm") is None:
        seqs = _hf_rollouts(model_dir, prompts, samples, max_tokens, seed, temperature)
        if log:
            log(f"rollouts (transformers; vLLM is not installed): {len(seqs)} sequences, "
                f"{sum(len(s) for s in seqs)} tokens in {time.perf_counter() - t0:.1f}s")
        return seqs
    from real.engine import RolloutEngine, Sampling

    engine = RolloutEngine(model_dir, None, max_num_seqs=min(64, max(1, len(prompts) * samples)), seed=seed)
    try:
        results = engine.generate(prompts, 1, Sampling(temperature=0.0, max_tokens=max_tokens))
        if samples > 1:
            sampled = engine.generate(prompts, samples - 1, Sampling(temperature=temperature, max_tokens=max_tokens, seed=seed))
            for r, s in zip(results, sampled):
                r.samples += s.samples
    finally:
        engine.close()
    seqs = [r.prompt_token_ids + s.token_ids for r in results for s in r.samples]
    if log:
        n_tok = sum(len(s) for s in seqs)
        log(f"rollouts: {len(seqs)} sequences, {n_tok} tokens in {time.perf_counter() - t0:.1f}s")
    return seqs


@torch.no_grad()
def _hf_rollouts(model_dir: str | Path, prompts: Sequence[str | Sequence[int]], samples: int, max_tokens: int,
                 seed: int, temperature: float) -> list[list[int]]:
    from transformers import AutoTokenizer

    model = load_target(model_dir)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    eos = model.config.eos_token_id
    gen = torch.Generator().manual_seed(seed)
    seqs = []
    for p in prompts:
        ids = tok(p, add_special_tokens=True)["input_ids"] if isinstance(p, str) else list(p)
        for j in range(samples):
            out = list(ids)
            past, inp = None, torch.tensor([ids])
            for _ in range(max_tokens):
                o = model(input_ids=inp, past_key_values=past, use_cache=True)
                past, logits = o.past_key_values, o.logits[0, -1]
                if j == 0 or temperature <= 0:
                    nxt = int(logits.argmax())
                else:
                    nxt = int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=gen))
                out.append(nxt)
                if nxt == eos:
                    break
                inp = torch.tensor([[nxt]])
            seqs.append(out)
    return seqs


def train_from_target(model_dir: str | Path, out_dir: str | Path, steps: int = 300, seed: int = 0,
                      prompts: int = 32, samples: int = 4, max_tokens: int = 256, lr: float = 1e-3,
                      mix: str | None = None, temperature: float = 1.0,
                      log: Callable[[str], None] | None = print) -> Path:
    """`tlt drafter train`: sample the target on task prompts (real.task) or generic prompts,
    train a drafter on the rollouts' hidden states, save it atomically."""
    texts = task_prompts(prompts, seed, mix)
    source = "real.task" if texts is not None else "generic random-token prompts"
    prompt_list: list[Any] = texts if texts is not None else generic_prompts(model_dir, prompts, seed)
    if log:
        log(f"training data: {len(prompt_list)} prompts from {source}, {samples} samples each, up to {max_tokens} tokens")
    seqs = rollout_sequences(model_dir, prompt_list, samples, max_tokens, seed, temperature, log)
    model = load_target(model_dir)
    # Train on whole responses: a drafter never shown positions past max_len collapses there
    # (measured: acceptance 0.93 below 512 tokens of context, 0.30 above, with max_len 512).
    config = TrainConfig(max_len=max(len(s) for s in seqs))
    drafter = train_drafter(model, seqs, steps=steps, lr=lr, seed=seed, config=config, log=log)
    return save_drafter(drafter, out_dir, model.config,
                        extra={"target": str(model_dir), "prompts": len(prompt_list), "prompt_source": source,
                               "samples": samples, "max_tokens": max_tokens, "temperature": temperature})
