"""The EAGLE-3 head as vLLM's `Eagle3LlamaForCausalLM` runs it, and its training-time-test loss.

Architecture (vllm/model_executor/models/llama_eagle3.py; the public layout of SafeAILab's
`traineagle3` and SpecForge, real/drafter/layout.py):

    h   = fc(concat(a_1[t], a_2[t], a_3[t]))      # three target layers' hidden states, 3H_t -> H
    x   = concat(input_layernorm(embed(token[t+1])), hidden_norm(h))         # 2H
    y   = h + attn(x)                            # `midlayer`: attention reads 2H, residual is h
    out = y + mlp(post_attention_layernorm(y))   # fed back as h (no fc) at the next draft step
    logits = lm_head(norm(out))                  # the draft vocabulary; id + d2t[id] = target id

`a_i[t]` is the target's residual stream entering layer `aux_layers[i]` (vLLM's aux hidden state
i: transformers' `hidden_states[i]`). The embedding is the target's unless the head ships its own;
the LM head is the head's own, over a draft vocabulary (`draft_vocab_size` tokens, `t2d` marks
them in the target's). Training (`eagle3_loss`) is EAGLE-3's training-time test: the head is
unrolled `steps` times over its own outputs, step j at position t reading token t+1+j and
attending to step 0's keys up to t plus its own chain's keys (what vLLM's proposer attends to when
it drafts), each step scored by cross-entropy against the target's next-token distribution over
the draft vocabulary, weighted 0.8^j (SafeAILab's traineagle3/main.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from real.drafter.eagle import EagleConfig, check_same_sizes
from real.drafter.layout import EAGLE3_VARIANTS
from real.drafter.layers import MLP, Attention, RMSNorm, layer_output, rotated_qkv

ARCHITECTURE = "LlamaForCausalLMEagle3"  # SafeAILab's and SpecForge's name; vLLM runs it
STEP_DECAY = 0.8  # weight of training-time-test step j: 0.8^j (SafeAILab traineagle3)


def _rope(cfg: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    kind = params.get("rope_type", params.get("type", "default"))
    return float(theta), (dict(params) if kind not in (None, "default") else None)


@dataclass(frozen=True)
class Eagle3Config:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    aux_layers: tuple[int, ...]
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: Any = None  # a config's rope_scaling dict ('linear', 'llama3'), None: default
    max_position_embeddings: int = 2048
    initializer_range: float = 0.02
    attention_bias: bool = False

    @classmethod
    def from_head_config(cls, cfg: dict[str, Any], aux_layers: Sequence[int]) -> "Eagle3Config":
        """From a public head's config.json; `aux_layers` as real/drafter/resolve.py resolved
        them. Variants this head does not implement are refused, naming the field."""
        for flag in EAGLE3_VARIANTS:
            if cfg.get(flag) or (cfg.get("eagle_config") or {}).get(flag):
                raise ValueError(f"EAGLE-3 head with {flag}: true: this project trains the plain "
                                 "Llama EAGLE-3 head only (vLLM serves it)")
        if int(cfg.get("num_hidden_layers", 1)) != 1:
            raise ValueError(f"EAGLE-3 head of {cfg['num_hidden_layers']} layers "
                             "(num_hidden_layers): this project trains one-layer heads only")
        h, nh = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        theta, scaling = _rope(cfg)
        return cls(hidden_size=h, intermediate_size=int(cfg["intermediate_size"]),
                   num_attention_heads=nh,
                   num_key_value_heads=int(cfg.get("num_key_value_heads") or nh),
                   head_dim=int(cfg.get("head_dim") or h // nh), vocab_size=int(cfg["vocab_size"]),
                   draft_vocab_size=int(cfg.get("draft_vocab_size") or cfg["vocab_size"]),
                   target_hidden_size=int(cfg.get("target_hidden_size") or h),
                   aux_layers=tuple(int(i) for i in aux_layers),
                   rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_theta=theta,
                   rope_scaling=scaling,
                   max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
                   initializer_range=float(cfg.get("initializer_range", 0.02)),
                   attention_bias=bool(cfg.get("attention_bias", False)))

    def to_config_dict(self, target_cfg: Any = None) -> dict[str, Any]:
        """The head's config.json in the public layout (vLLM and SGLang read it)."""
        out: dict[str, Any] = {
            "architectures": [ARCHITECTURE], "model_type": "llama", "hidden_act": "silu",
            "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
            "num_hidden_layers": 1, "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size, "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta, "max_position_embeddings": self.max_position_embeddings,
            "initializer_range": self.initializer_range, "attention_bias": self.attention_bias,
            "tie_word_embeddings": False, "torch_dtype": "float32",
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(self.aux_layers),
                             "use_aux_hidden_state": True}}
        if self.rope_scaling:
            out["rope_scaling"] = dict(self.rope_scaling)
        if self.target_hidden_size != self.hidden_size:
            out["target_hidden_size"] = self.target_hidden_size
        for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if target_cfg is not None and getattr(target_cfg, k, None) is not None:
                out[k] = getattr(target_cfg, k)
        return out


class Eagle3Layer(nn.Module):
    """`midlayer`: a Llama decoder layer whose attention reads the normed embedding and hidden
    state side by side."""

    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.input_layernorm, self.hidden_norm = RMSNorm(h, eps), RMSNorm(h, eps)
        self.self_attn = Attention(cfg, in_size=2 * h, bias=cfg.attention_bias)
        self.mlp = MLP(cfg)
        self.post_attention_layernorm = RMSNorm(h, eps)


class Eagle3Drafter(nn.Module):
    """The EAGLE-3 head; `target_head` (the target's LM head, frozen, never saved) scores it."""

    SHARED = ("embed_tokens", "target_head")
    method = "eagle3"  # vLLM's name

    def __init__(self, cfg: Eagle3Config, embed_tokens: nn.Module | None = None,
                 target_head: nn.Module | None = None, own_embed: bool = False):
        super().__init__()
        self.config, self.own_embed = cfg, own_embed
        self.embed_tokens = (embed_tokens if embed_tokens is not None
                             else nn.Embedding(cfg.vocab_size, cfg.hidden_size))
        self.target_head = (target_head if target_head is not None
                            else nn.Linear(cfg.target_hidden_size, cfg.vocab_size, bias=False))
        for m in (self.embed_tokens, self.target_head):
            m.requires_grad_(False)
        self.fc = nn.Linear(len(cfg.aux_layers) * cfg.target_hidden_size, cfg.hidden_size,
                            bias=False)
        self.midlayer = Eagle3Layer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.arange(cfg.vocab_size) < cfg.draft_vocab_size)
        for name, p in self.named_parameters():
            if name.split(".")[0] in self.SHARED:
                continue
            if p.dim() > 1:
                nn.init.normal_(p, std=cfg.initializer_range)
            else:  # the norms
                nn.init.ones_(p)

    @property
    def aux_layers(self) -> tuple[int, ...]:
        return self.config.aux_layers

    @classmethod
    def from_target(cls, target_model: nn.Module, draft_tokens: Sequence[int],
                    aux_layers: Sequence[int]) -> "Eagle3Drafter":
        """A fresh head of the target's sizes over the draft vocabulary `draft_tokens` (target
        ids), its LM head started from the target's rows of them."""
        t = EagleConfig.from_target_config(target_model.config)
        used = sorted({int(i) for i in draft_tokens})
        cfg = Eagle3Config(t.hidden_size, t.intermediate_size, t.num_attention_heads,
                           t.num_key_value_heads, t.head_dim, t.vocab_size, len(used),
                           t.hidden_size, tuple(aux_layers), t.rms_norm_eps, t.rope_theta,
                           max_position_embeddings=t.max_position_embeddings)
        head = cls(cfg, target_model.get_input_embeddings(), target_model.get_output_embeddings())
        ids = torch.tensor(used)
        head.d2t.copy_(ids - torch.arange(len(used)))
        head.t2d.zero_()
        head.t2d[ids] = True
        head.lm_head.weight.data.copy_(head.target_head.weight.data[ids])
        return head

    def on_target(self, target_model: nn.Module) -> "Eagle3Drafter":
        """A head of this one's shape on `target_model` (weights not copied)."""
        embed = self.embed_tokens if self.own_embed else target_model.get_input_embeddings()
        return Eagle3Drafter(self.config, embed, target_model.get_output_embeddings(),
                             self.own_embed)

    def share_target(self, target_model: nn.Module) -> None:
        """After a policy update: the new target's embedding (unless own) and LM head."""
        check_same_sizes(target_model, self.config.target_hidden_size, self.config.vocab_size)
        if not self.own_embed:
            self.embed_tokens = target_model.get_input_embeddings().requires_grad_(False)
        self.target_head = target_model.get_output_embeddings().requires_grad_(False)

    # The steps vLLM's proposer runs (real/drafter/chains.py).

    @property
    def decoder(self) -> nn.Module:
        return self.midlayer

    def chain_input(self, tokens: torch.Tensor, hidden: torch.Tensor,
                    first: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """(attention input, residual): `hidden` is the target layers' states at the context
        (`first`: through fc), the head's own previous output after."""
        h = self.fc(hidden) if first else hidden
        emb = self.midlayer.input_layernorm(self.embed_tokens(tokens).to(h.dtype))
        return torch.cat((emb, self.midlayer.hidden_norm(h)), dim=-1), h

    def chain_output(self, residual: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        return layer_output(self.midlayer, residual, attn_out)

    def draft_logits(self, out: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(out))

    def draft_tokens(self, out: torch.Tensor) -> torch.Tensor:
        """The drafted target ids (the draft vocabulary's argmax, mapped through d2t)."""
        d = self.draft_logits(out).argmax(-1)
        return d + self.d2t[d]

    def target_tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.target_head(hidden).argmax(-1)

    def ttt_logits(self, aux: torch.Tensor, tokens: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Draft logits [B, T-1, draft vocab] of each training-time-test step: step j at position
        t reads token t+1+j (0 past the end) and the previous step's output at t, at RoPE
        position t+j, attending to step 0's keys at positions <= t and its chain's keys (each
        step's key at t: one more block of keys, masked to its diagonal)."""
        n = tokens.shape[1] - 1
        base = torch.arange(n, device=tokens.device)
        causal = base[None, :] <= base[:, None]
        eye = torch.eye(n, dtype=torch.bool, device=tokens.device)
        h, keys, vals, logits = aux[:, :n], [], [], []
        for j in range(steps):
            ids = F.pad(tokens[:, 1 + j: 1 + j + n], (0, j))
            x, residual = self.chain_input(ids, h, first=j == 0)
            q, k, v = rotated_qkv(self.midlayer.self_attn, x, (base + j).expand(len(ids), n))
            keys.append(k)
            vals.append(v)
            if j == 0:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                mask = torch.cat([causal] + [eye] * j, dim=-1)
                o = F.scaled_dot_product_attention(q, torch.cat(keys, 2), torch.cat(vals, 2),
                                                   attn_mask=mask)
            h = self.chain_output(residual, o)
            logits.append(self.draft_logits(h))
        return logits

    def drafter_state_dict(self) -> dict[str, torch.Tensor]:
        """The head's tensors as the public layout names them (an own embedding included)."""
        shared = ("target_head",) if self.own_embed else self.SHARED
        return {k: v.detach().cpu().contiguous().clone() for k, v in self.state_dict().items()
                if k.split(".")[0] not in shared}

    def load_drafter_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        own = self.drafter_state_dict()
        if set(state) != set(own):
            raise ValueError(f"not an EAGLE-3 head of this shape: missing "
                             f"{sorted(set(own) - set(state))}, unexpected "
                             f"{sorted(set(state) - set(own))}")
        self.load_state_dict({**self.state_dict(), **state})


def eagle3_loss(drafter: Eagle3Drafter, aux: torch.Tensor, tokens: torch.Tensor,
                final: torch.Tensor, mask: torch.Tensor, steps: int
                ) -> tuple[torch.Tensor, dict[str, float]]:
    """The training-time-test loss over right-padded sequences: aux [B, T, n*H_t] the target
    layers' states, tokens [B, T], final [B, T, H_t] the target's final-norm states (its LM head
    gives the distribution each step is scored against), mask [B, T] real positions. Positions
    whose target argmax is outside the draft vocabulary are left out (SafeAILab's mask). Returns
    the loss and its parts: ce and top1 of step 0 (top1: draft and target argmax agree)."""
    n = tokens.shape[1] - 1
    with torch.no_grad():
        target_logits = drafter.target_head(final).float()
    total, parts = 0.0, {}
    for j, logits in enumerate(drafter.ttt_logits(aux, tokens, steps)):
        m = min(n, tokens.shape[1] - 1 - j)
        if m <= 0:
            break
        tl = target_logits[:, 1 + j: 1 + j + m]
        keep = mask[:, 1 + j: 1 + j + m] & mask[:, :m] & drafter.t2d[tl.argmax(-1)]
        p = torch.softmax(tl[..., drafter.t2d], -1)
        lp = torch.log_softmax(logits[:, :m].float(), -1)
        w = keep.to(lp.dtype)
        ce = (-(p * lp).sum(-1) * w).sum() / w.sum().clamp_min(1.0)
        total = total + STEP_DECAY ** j * ce
        if j == 0:
            with torch.no_grad():
                agree = (lp.argmax(-1) == p.argmax(-1)).to(w.dtype)
                parts = {"ce": ce.item(), "top1": ((agree * w).sum() / w.sum().clamp_min(1)).item()}
    loss = total if isinstance(total, torch.Tensor) else torch.zeros((), requires_grad=True)
    return loss, {"loss": loss.item(), **parts}
