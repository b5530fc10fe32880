"""Spot drafter training: TLT's idle rollout workers train the EAGLE drafter until the rollout ends.

During an RL step most rollout workers finish their share long before the last (longest)
response does. TLT puts those idle workers to work training the speculative drafter on the
target's hidden states from recent rollouts, and stops them the moment the rollout ends. This
module is that trainer, on top of real/drafter/ (the drafter and its loss in `eagle`,
`train_step` and `featurize` in `training`, `load_drafter` in `checkpoint`):

- `DrafterBuffer` holds the hidden-state records of the last few RL steps (the drafter should
  follow the policy as it moves, so older steps drop out).
- `SpotTrainer.train_until(stop, records)` runs one EAGLE `train_step` a loop on seeded
  minibatches and checks `stop` before each, so it returns within one drafter step of being
  told. The optimiser (AdamW, constant learning rate: a spot run has no known length) and the
  minibatch generator persist across calls, so many short spot runs make one training run.
- `set_target` swaps in the updated policy's embedding and LM head after the policy update
  (shared with the drafter and frozen, as in vLLM).
- `average_states` merges the drafter copies that several idle workers trained, weighted by
  the steps each did.
- `estimate_accept_len` measures what the drafter is worth to the rollout: the expected tokens
  per verify pass of a chain draft under greedy verification; `estimate_ngram_accept_len` the
  same for vLLM's n-gram drafter, on the same records (the n-gram <-> EAGLE switch compares them).

Needs torch and transformers (the 'cpu' extra).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from real.drafter import ngram
from real.drafter.checkpoint import load_drafter
from real.drafter.eagle import EagleConfig, EagleDrafter, load_target, rotate_half
from real.drafter.records import HiddenRecord
from real.drafter.training import DrafterTrainConfig, featurize, train_step
from real.torch_utils import pad_right

SPOT_STATE_VERSION = 1


@dataclass
class SpotResult:
    steps: int  # drafter steps completed in this call
    seconds: float
    loss: float  # mean EAGLE loss over this call's steps (nan when none)
    top1: float  # mean drafter/target top-1 agreement over this call's steps (nan when none)
    stopped: bool  # ended because `stop` was set (not max_steps, not for want of data)


class DrafterBuffer:
    """Hidden-state records of the last `max_steps` RL steps.

    `add(rl_step, records)` appends to that step's records (several workers may add to one
    step); once more than `max_steps` distinct steps are held, the oldest (lowest-numbered)
    steps are dropped. `records()` lists the newest step's records first."""

    def __init__(self, max_steps: int = 2):
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, not {max_steps}")
        self.max_steps = max_steps
        self._steps: OrderedDict[int, list[HiddenRecord]] = OrderedDict()

    def add(self, rl_step: int, records: Sequence[HiddenRecord]) -> None:
        self._steps.setdefault(int(rl_step), []).extend(records)
        for old in sorted(self._steps)[: max(0, len(self._steps) - self.max_steps)]:
            del self._steps[old]

    def steps(self) -> list[int]:
        """The RL steps held, newest first."""
        return sorted(self._steps, reverse=True)

    def records(self) -> list[HiddenRecord]:
        return [r for s in self.steps() for r in self._steps[s]]



class SpotTrainer:
    """Trains one EAGLE drafter in short, interruptible runs against a frozen target.

    `target`: a model directory (loaded with `load_target`) or a loaded `transformers` causal
    LM; only its embedding and LM head are used by the drafter (shared, frozen), and its forward
    by `hidden_records`. `drafter_dir`: a saved drafter to go on training (`load_drafter`), else
    a fresh `EagleDrafter.from_target` initialised from `seed` (the global torch RNG is left as
    it was). Training is deterministic for a seed and a sequence of calls. A module passed in
    is put in eval mode and frozen (its embedding and LM head become the drafter's): pass a copy
    of a policy that is still being trained."""

    def __init__(self, target_model_dir_or_module: str | Path | nn.Module,
                 drafter_dir: str | Path | None = None, lr: float = 1e-4, batch_size: int = 8,
                 max_len: int = 1024, seed: int = 0):
        self.target = _as_target(target_model_dir_or_module)
        self.config = DrafterTrainConfig(lr=lr, seed=seed, batch_size=batch_size, max_len=max_len)
        if drafter_dir is not None:
            self.drafter = load_drafter(drafter_dir, self.target)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                self.drafter = EagleDrafter.from_target(self.target)
        params = [p for p in self.drafter.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=self.config.weight_decay)
        self.generator = torch.Generator().manual_seed(seed)
        self.steps = 0  # drafter steps completed over all calls (updated after each step)

    # ------------------------------------------------------------ data

    def hidden_records(self, sequences: Sequence[Sequence[int]]) -> list[HiddenRecord]:
        """The target's hidden states over fresh sequences (no grad), truncated to `max_len`
        tokens. Sequences shorter than 3 tokens are skipped (as `featurize` does)."""
        feats = featurize(self.target, sequences, self.config.max_len, self.config.batch_size)
        return [HiddenRecord(ids.tolist(), hidden) for ids, hidden in feats]

    # ------------------------------------------------------------ training

    def train_until(self, stop: threading.Event, records: Sequence[HiddenRecord],
                    max_steps: int | None = None) -> SpotResult:
        """Train on seeded minibatches of `records` (drawn with replacement) until `stop` is
        set, `max_steps` steps are done, or at once when no record has 2 tokens. `stop` is
        checked before each drafter step; nothing else is waited on."""
        t0 = time.perf_counter()
        max_len = self.config.max_len
        data = [(torch.as_tensor(r.token_ids[:max_len], dtype=torch.long), r.hidden[:max_len])
                for r in records if len(r.token_ids) >= 2]
        done, stopped, loss, top1 = 0, False, 0.0, 0.0
        self.drafter.train()
        while data:
            if max_steps is not None and done >= max_steps:
                break
            if stop.is_set():
                stopped = True
                break
            idx = torch.randint(len(data), (min(self.config.batch_size, len(data)),),
                                generator=self.generator).tolist()
            ids, mask = pad_right([data[i][0] for i in idx])
            hidden, _ = pad_right([data[i][1] for i in idx])
            parts = train_step(self.drafter, self.optimizer, hidden, ids, mask, self.config,
                               self.generator)
            done += 1
            self.steps += 1
            loss += parts["loss"]
            top1 += parts["top1"]
        self.drafter.eval()
        nan = float("nan")
        return SpotResult(steps=done, seconds=time.perf_counter() - t0,
                          loss=loss / done if done else nan, top1=top1 / done if done else nan,
                          stopped=stopped)

    def set_target(self, target_model_dir_or_module: str | Path | nn.Module) -> None:
        """After the policy update: the drafter shares (frozen) the new target's embedding and
        LM head. The drafter's own weights and the optimiser state carry over."""
        target = _as_target(target_model_dir_or_module)
        cfg = EagleConfig.from_target_config(target.config)
        if cfg != self.drafter.config:
            raise ValueError(f"the new target's shapes differ from the drafter's: {cfg} vs "
                             f"{self.drafter.config}")
        self.target = target
        self.drafter.embed_tokens = target.get_input_embeddings()
        self.drafter.lm_head = target.get_output_embeddings()
        for m in (self.drafter.embed_tokens, self.drafter.lm_head):
            m.requires_grad_(False)

    # ------------------------------------------------------------ state

    def drafter_state(self) -> dict[str, torch.Tensor]:
        """The trained weights (a CPU copy), named as vLLM loads them."""
        return self.drafter.drafter_state_dict()

    def load_drafter_state(self, state: dict[str, torch.Tensor]) -> None:
        self.drafter.load_drafter_state_dict(state)

    def state_dict(self) -> dict[str, Any]:
        """Drafter weights, optimiser, minibatch generator and step count (for `torch.save`)."""
        return {"version": SPOT_STATE_VERSION, "drafter": self.drafter_state(),
                "optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state(),
                "steps": self.steps, "config": asdict(self.config)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") != SPOT_STATE_VERSION:
            raise ValueError(f"spot trainer state version {state.get('version')!r}; this code "
                             f"reads {SPOT_STATE_VERSION}")
        self.load_drafter_state(state["drafter"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.steps = int(state["steps"])

    # ------------------------------------------------------------ evaluation

    @torch.no_grad()
    def estimate_accept_len(self, records: Sequence[HiddenRecord], k: int, max_starts: int = 64,
                            drafter: EagleDrafter | None = None,
                            stop: threading.Event | None = None) -> float:
        """Expected tokens per verify pass with a chain draft of `k` tokens under greedy
        verification: 1 + the mean number of leading draft tokens the target accepts.

        At each start position t of a record (up to `max_starts` per record, evenly spaced) the
        drafter runs as vLLM's EAGLE proposer does: its context is the pairs (hidden[i],
        token[i+1]) for i <= t, then k steps autoregressively, each feeding back its own
        predicted hidden state and argmax token at the next position. Draft token j is
        accepted when all before it were and it equals the target's argmax
        `lm_head(hidden[t+j])`. That reference is the target's greedy choice only while the
        record's own tokens follow the accepted drafts; where a sampled record leaves them, its
        hidden states say nothing about the greedy path and the chain is cut there. So the
        estimate is exact on greedy records and a lower bound on sampled ones.

        `drafter`: judge another drafter on this target (default: the one being trained), e.g.
        `static_drafter(state)`. `stop`: when set, the estimate gives up between two records and
        returns NaN (an idle worker judging drafters is stopped when the rollout ends)."""
        drafter = drafter or self.drafter
        drafter.eval()
        accepted = []
        for ids, hidden, ref, starts in self._chain_starts(records, k, max_starts):
            if stop is not None and stop.is_set():
                return float("nan")
            accepted.append(self._chain_accepts(ids, hidden, ref, starts, k, drafter))
        return 1.0 + torch.cat(accepted).float().mean().item()

    def static_drafter(self, state: dict[str, torch.Tensor]) -> EagleDrafter:
        """A drafter with the weights `state` on this trainer's current target (its embedding and LM
        head, as vLLM shares the reloaded target's): e.g. the run's initial drafter, never
        trained."""
        drafter = EagleDrafter.from_target(self.target)
        drafter.load_drafter_state_dict(state)
        return drafter.eval()

    @torch.no_grad()
    def estimate_ngram_accept_len(self, records: Sequence[HiddenRecord], k: int,
                                  max_starts: int = 64,
                                  stop: threading.Event | None = None) -> float:
        """`estimate_accept_len` for vLLM's n-gram drafter: the same start positions, target
        references and chain cut, with the draft vLLM's prompt lookup makes from the tokens seen
        (real/drafter/ngram.py). A start where the lookup finds no match drafts nothing and counts
        as one token per pass, as it decodes. `stop`: as for `estimate_accept_len`."""
        accepted: list[torch.Tensor] = []
        for ids, _, ref, starts in self._chain_starts(records, k, max_starts):
            if stop is not None and stop.is_set():
                return float("nan")
            tokens = ids.tolist()
            counts = []
            for t in starts.tolist():
                count = 0
                for j, d in enumerate(ngram.propose(tokens[: t + 2], k), start=1):
                    if d != int(ref[t + j]):
                        break
                    count += 1
                    # as in _chain_accepts: the next reference holds only if the record went on
                    # with d
                    if j < k and tokens[t + j + 1] != d:
                        break
                counts.append(count)
            accepted.append(torch.as_tensor(counts, dtype=torch.long))
        return 1.0 + torch.cat(accepted).float().mean().item()

    def _chain_starts(self, records: Sequence[HiddenRecord], k: int, max_starts: int):
        """Per record long enough for a chain of `k`: its ids, hidden states, the target's greedy
        token after each position (`lm_head(hidden)`) and up to `max_starts` evenly spaced
        starts."""
        if k < 1:
            raise ValueError(f"k must be at least 1, not {k}")
        out = []
        for r in records:
            ids = torch.as_tensor(r.token_ids, dtype=torch.long)
            hidden = r.hidden.to(torch.float32)
            # the chain at start t is judged against lm_head(hidden[t+1..t+k])
            last = len(ids) - 1 - k
            if last < 0:
                continue
            starts = torch.linspace(0, last, min(max_starts, last + 1)).round().long().unique()
            out.append((ids, hidden, self.drafter.lm_head(hidden).argmax(-1), starts))
        if not out:
            raise ValueError(f"no record has the {k + 2} tokens a chain of {k} needs")
        return out

    def _chain_accepts(self, ids: torch.Tensor, hidden: torch.Tensor, ref: torch.Tensor,
                       starts: torch.Tensor, k: int, drafter: EagleDrafter) -> torch.Tensor:
        """Accepted draft tokens for chains starting at each of `starts` in one record."""
        rows = len(starts)
        alive = torch.ones(rows, dtype=torch.bool)
        count = torch.zeros(rows, dtype=torch.long)
        for j, d in enumerate(chain_drafts(drafter, ids, hidden, starts, k), start=1):
            alive &= d == ref[starts + j]
            count += alive.long()
            if j < k:
                # the next reference, lm_head(hidden[t+j+1]), holds only if the record went on
                # with d
                alive &= ids[starts + j + 1] == d
        return count


@torch.no_grad()
def chain_drafts(drafter: EagleDrafter, ids: torch.Tensor, hidden: torch.Tensor,
                 starts: torch.Tensor, k: int):
    """The `k` tokens the drafter proposes after each start t of one record, as vLLM's EAGLE
    proposer runs it: its context is the pairs (hidden[i], ids[i+1]) for i <= t, then it feeds back
    its own predicted hidden state and argmax token, position after position. Yields one [starts]
    tensor of draft tokens per draft step.

    The same arithmetic as `drafter.predict_hidden` over [context; drafts so far] for every step
    (causal attention: a position sees only earlier ones), but the context's keys and values are
    computed once for all starts and each step computes only the new positions, so the cost of a
    chain does not grow with the context times the draft length."""
    layer = drafter.layers[0]
    attn = layer.self_attn
    last = int(starts.max())
    x = drafter.fc(torch.cat((drafter.embed_tokens(ids[1: last + 2]).to(hidden.dtype),
                              hidden[: last + 1]), dim=-1))
    q, key, val = _qkv(attn, x[None], torch.arange(last + 1)[None])  # [1, heads, T, hd]
    out = F.scaled_dot_product_attention(q, key, val, is_causal=True)
    g = _layer_rest(layer, x[None], out)[0][starts]  # step 1: the context's own output at t
    d = drafter.lm_head(g).argmax(-1)
    yield d
    span = torch.arange(last + 1)
    # context mask per start: keys at positions <= t
    ctx_mask = (span[None, :] <= starts[:, None])[:, None, None, :]  # [S, 1, 1, T]
    keys, vals = [], []
    for j in range(2, k + 1):
        # [S, 1, H]
        xs = drafter.fc(torch.cat((drafter.embed_tokens(d).to(g.dtype), g), dim=-1))[:, None]
        qs, ks, vs = _qkv(attn, xs, (starts + j - 1)[:, None])  # [S, heads, 1, hd]
        keys.append(ks)
        vals.append(vs)
        k_all = torch.cat((key.expand(len(starts), -1, -1, -1), *keys), dim=2)
        v_all = torch.cat((val.expand(len(starts), -1, -1, -1), *vals), dim=2)
        mask = torch.cat((ctx_mask, torch.ones(len(starts), 1, 1, len(keys), dtype=torch.bool)),
                         dim=-1)
        o = F.scaled_dot_product_attention(qs, k_all, v_all, attn_mask=mask)
        g = _layer_rest(layer, xs, o)[:, 0]
        d = drafter.lm_head(g).argmax(-1)
        yield d


def _qkv(attn: nn.Module, x: torch.Tensor, positions: torch.Tensor):
    """The attention's rotated queries and keys and its values, heads repeated for grouped KV
    (as `Attention.forward` computes them): each [B, heads, T, head_dim]."""
    b, t, _ = x.shape
    q = attn.q_proj(x).view(b, t, attn.nh, attn.hd).transpose(1, 2)
    k = attn.k_proj(x).view(b, t, attn.nkv, attn.hd).transpose(1, 2)
    v = attn.v_proj(x).view(b, t, attn.nkv, attn.hd).transpose(1, 2)
    freqs = positions.to(torch.float32)[..., None] * attn.inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)[:, None]
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    if attn.nkv != attn.nh:
        k = k.repeat_interleave(attn.nh // attn.nkv, dim=1)
        v = v.repeat_interleave(attn.nh // attn.nkv, dim=1)
    return q, k, v


def _layer_rest(layer: nn.Module, x: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
    """The decoder layer after its attention kernel: output projection, residual, MLP."""
    b, t, _ = x.shape
    attn = layer.self_attn
    y = x + attn.o_proj(attn_out.transpose(1, 2).reshape(b, t, attn.nh * attn.hd))
    return y + layer.mlp(layer.post_attention_layernorm(y))


def average_states(states: Sequence[dict[str, torch.Tensor]],
                   weights: Sequence[float]) -> dict[str, torch.Tensor]:
    """The weighted mean of drafter states (the copies idle workers trained, weighted by the
    steps each did). Zero-weight states are left out, so weights [1, 0] give the first state."""
    if len(states) != len(weights) or not states:
        raise ValueError(f"{len(states)} states and {len(weights)} weights: need as many of each, "
                         "at least one")
    if any(w < 0 or not math.isfinite(w) for w in weights) or sum(weights) <= 0:
        raise ValueError(f"weights must be finite, non-negative and not all zero: {list(weights)}")
    keys = set(states[0])
    if any(set(s) != keys for s in states):
        raise ValueError("the states do not hold the same tensors")
    total = float(sum(weights))
    used = [(s, w / total) for s, w in zip(states, weights) if w > 0]
    out = {}
    for name in states[0]:
        acc = sum(s[name].to(torch.float32) * w for s, w in used)
        out[name] = acc.to(states[0][name].dtype)
    return out


def _as_target(target: str | Path | nn.Module) -> nn.Module:
    if isinstance(target, (str, Path)):
        return load_target(target)
    target.eval().requires_grad_(False)
    return target
