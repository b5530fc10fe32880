"""The EAGLE drafter: its config, the torch module, and its loss (what vLLM's EAGLE head runs).

Architecture (what vLLM's `EagleLlamaForCausalLM` runs, so a checkpoint saved by
real/drafter/checkpoint.py loads there):

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
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from real.drafter.layers import MLP, Attention, RMSNorm, layer_output, rotated_qkv
from real.drafter.records import drafter_states
from real.span_attention import Spans, attend, packed_spans

REG_WEIGHT = 1.0  # hidden-state regression (smooth L1), as EAGLE
CE_WEIGHT = 0.1  # token cross-entropy against the target's distribution, as EAGLE
ARCHITECTURE = "EagleLlamaForCausalLM"


# ---------------------------------------------------------------- config


def _rope_theta(cfg: Any) -> float:
    params = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if isinstance(params, dict) and params.get("rope_type", params.get("type", "default")) not in (
        "default",
        None,
    ):
        raise NotImplementedError(
            f"target RoPE type {params.get('rope_type')!r}: the drafter implements default RoPE "
            f"only"
        )
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    return float(theta if theta is not None else getattr(cfg, "rope_theta", 10000.0))


@dataclass(frozen=True)
class EagleConfig:
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
    def from_target_config(cls, cfg: Any) -> "EagleConfig":
        """From a `transformers` config of a Llama-like target (Qwen2, Llama, ...)."""
        text = getattr(cfg, "text_config", None) or cfg
        h, nh = int(text.hidden_size), int(text.num_attention_heads)
        return cls(
            hidden_size=h,
            intermediate_size=int(text.intermediate_size),
            num_attention_heads=nh,
            num_key_value_heads=int(getattr(text, "num_key_value_heads", None) or nh),
            head_dim=int(getattr(text, "head_dim", None) or h // nh),
            vocab_size=int(text.vocab_size),
            rms_norm_eps=float(getattr(text, "rms_norm_eps", 1e-6)),
            rope_theta=_rope_theta(text),
            max_position_embeddings=int(getattr(text, "max_position_embeddings", 2048)),
            initializer_range=float(getattr(text, "initializer_range", 0.02)),
        )

    def to_llama_config(self, target_cfg: Any = None, architecture: str = ARCHITECTURE):
        """The checkpoint's config.json; `architecture` "LlamaForCausalLM" with `bias: false`
        for SafeAILab's public layout (vLLM renames it EagleLlamaForCausalLM)."""
        from transformers import LlamaConfig

        extra = {}
        for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if target_cfg is not None and getattr(target_cfg, k, None) is not None:
                extra[k] = getattr(target_cfg, k)
        cfg = LlamaConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=1,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            max_position_embeddings=self.max_position_embeddings,
            rms_norm_eps=self.rms_norm_eps,
            rope_theta=self.rope_theta,
            attention_bias=False,
            mlp_bias=False,
            hidden_act="silu",
            tie_word_embeddings=False,
            initializer_range=self.initializer_range,
            **extra,
        )
        cfg.architectures = [architecture]
        if architecture != ARCHITECTURE:
            cfg.bias = False  # SafeAILab's EAGLE reads it: no bias on fc
        import transformers

        if int(transformers.__version__.split(".")[0]) >= 5:
            cfg.dtype = "float32"
        else:  # pragma: no cover - transformers 4 names it torch_dtype
            cfg.torch_dtype = "float32"
        return cfg


def check_same_sizes(target_model: nn.Module, hidden_size: int, vocab_size: int) -> None:
    """A new target must keep the hidden size and vocabulary a drafter reads."""
    cfg = EagleConfig.from_target_config(target_model.config)
    if (cfg.hidden_size, cfg.vocab_size) != (hidden_size, vocab_size):
        raise ValueError(f"the new target's hidden size and vocabulary ({cfg.hidden_size}, "
                         f"{cfg.vocab_size}) differ from the drafter's ({hidden_size}, "
                         f"{vocab_size})")


# ---------------------------------------------------------------- the module


class DecoderLayer(nn.Module):
    """A Llama decoder layer without its input norm (EAGLE's first layer)."""

    def __init__(self, cfg: EagleConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, positions: torch.Tensor,
                spans: Spans | None = None) -> torch.Tensor:
        q, k, v = rotated_qkv(self.self_attn, x, positions)
        if spans is not None:  # a packed row: causal within each sequence only
            return layer_output(self, x, attend(q, k, v, spans).transpose(1, 2))
        return layer_output(self, x, F.scaled_dot_product_attention(q, k, v, is_causal=True))


class EagleDrafter(nn.Module):
    """One decoder layer on `fc(concat(embedding, target hidden))`; the target's embedding (or the
    head's own, `own_embed`: a public head that ships one, as vLLM then uses it) and LM head."""

    SHARED = ("embed_tokens", "lm_head")
    method = "eagle"  # vLLM's name
    aux_layers: tuple[int, ...] = ()  # reads the target's final hidden state only

    def __init__(self, cfg: EagleConfig, embed_tokens: nn.Module | None = None,
                 lm_head: nn.Module | None = None, own_embed: bool = False):
        super().__init__()
        self.config = cfg
        self.own_embed = own_embed
        self.embed_tokens = (embed_tokens if embed_tokens is not None
                             else nn.Embedding(cfg.vocab_size, cfg.hidden_size))
        self.lm_head = (lm_head if lm_head is not None
                        else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False))
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
        cfg = EagleConfig.from_target_config(target_model.config)
        return cls(cfg, target_model.get_input_embeddings(), target_model.get_output_embeddings())

    def on_target(self, target_model: nn.Module) -> "EagleDrafter":
        """A drafter of this one's shape on `target_model` (weights not copied; an own embedding
        stays this head's)."""
        embed = self.embed_tokens if self.own_embed else target_model.get_input_embeddings()
        return EagleDrafter(self.config, embed, target_model.get_output_embeddings(),
                            self.own_embed)

    def share_target(self, target_model: nn.Module) -> None:
        """After a policy update: the new target's embedding (unless the head has its own) and LM
        head, frozen; refused when its hidden size or vocabulary differ from the drafter's."""
        check_same_sizes(target_model, self.config.hidden_size, self.config.vocab_size)
        if not self.own_embed:
            self.embed_tokens = target_model.get_input_embeddings().requires_grad_(False)
        self.lm_head = target_model.get_output_embeddings().requires_grad_(False)

    # The steps vLLM's proposer runs (real/drafter/chains.py), the same for EAGLE and EAGLE-3.

    @property
    def decoder(self) -> nn.Module:
        return self.layers[0]

    def chain_input(self, tokens: torch.Tensor, hidden: torch.Tensor,
                    first: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """(attention input, residual) at positions reading `tokens` and `hidden` (the target's at
        the context, the drafter's own output after: the same arithmetic)."""
        x = self.fc(torch.cat((self.embed_tokens(tokens).to(hidden.dtype), hidden), dim=-1))
        return x, x

    def chain_output(self, residual: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        return layer_output(self.decoder, residual, attn_out)

    def draft_tokens(self, out: torch.Tensor) -> torch.Tensor:
        return self.lm_head(out).argmax(-1)

    def target_tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's greedy token after each position of its final hidden states."""
        return self.lm_head(hidden).argmax(-1)

    def forward(
        self,
        hidden: torch.Tensor,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        spans: Sequence[tuple[int, int]] | Spans | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [B, T, H]: target hidden states at positions 0..T-1; tokens [B, T]: the tokens
        at positions 1..T. Returns (predicted hidden states at 1..T, logits for tokens at 2..T+1).
        Sequences are right-padded (attention is causal, so padding never reaches real positions),
        or packed into one row (B = 1) whose sequences' [start, end) are `spans`, with `positions`
        restarting at 0 in each (real/drafter/training.py's `pack_features`); attention then
        runs as real/span_attention.py's `attend` (its varlen kernel on a GPU)."""
        x = self.predict_hidden(hidden, tokens, positions, spans)
        return x, self.lm_head(x)

    def predict_hidden(
        self,
        hidden: torch.Tensor,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        spans: Sequence[tuple[int, int]] | Spans | None = None,
    ) -> torch.Tensor:
        """`forward` without the LM head: the predicted hidden states only (apply `lm_head` to
        the positions you need; over a large vocabulary the full logits are the costly part)."""
        b, t = tokens.shape
        if positions is None:
            positions = torch.arange(t, device=tokens.device).expand(b, t)
        if spans is not None and not isinstance(spans, Spans):
            spans = packed_spans(spans, tokens.device)
        emb = self.embed_tokens(tokens).to(hidden.dtype)
        x = self.fc(torch.cat((emb, hidden), dim=-1))
        for layer in self.layers:
            x = layer(x, positions, spans)
        return x

    def load_drafter_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load weights named as `drafter_state_dict` gives them (the shared ones stay)."""
        own = self.drafter_state_dict()
        if set(state) != set(own):
            raise ValueError(
                f"not a drafter state of this shape: missing {sorted(set(own) - set(state))}, "
                f"unexpected {sorted(set(state) - set(own))}"
            )
        self.load_state_dict({**self.state_dict(), **state})

    def drafter_state_dict(self) -> dict[str, torch.Tensor]:
        """The head's weights, named as vLLM's EagleLlamaForCausalLM loads them (an own embedding
        included, frozen)."""
        shared = ("lm_head",) if self.own_embed else self.SHARED
        return {k: v.detach().cpu().contiguous().clone() for k, v in self.state_dict().items()
                if k.split(".")[0] not in shared}


# ---------------------------------------------------------------- loss and target features


def eagle_loss(
    pred_hidden: torch.Tensor,
    pred_logits: torch.Tensor,
    target_hidden: torch.Tensor,
    target_logits: torch.Tensor,
    mask: torch.Tensor | None = None,
    reg_weight: float = REG_WEIGHT,
    ce_weight: float = CE_WEIGHT,
) -> tuple[torch.Tensor, dict[str, float]]:
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
def target_hidden_states(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
    aux_layers: Sequence[int] = (),
) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden [B, T, H], logits [B, T, V]) of a `transformers` causal LM over `input_ids`.

    `hidden` is `hidden_states[-1]` of a forward with `output_hidden_states=True`: the output of
    the final norm (equal to `last_hidden_state`), which is what vLLM passes to EAGLE; with
    `aux_layers` (an EAGLE-3 head's) those layers' states follow it on the last axis
    (real/drafter/records.py's `drafter_states`)."""
    out = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
    return drafter_states(out.hidden_states, aux_layers), out.logits


def load_target(model_dir: str | Path) -> nn.Module:
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    except TypeError:  # transformers < 4.56 calls it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32)
    model.eval().requires_grad_(False)
    return model
