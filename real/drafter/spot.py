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
  (shared with the drafter and frozen, as in vLLM; a head's own embedding stays).
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

from real.drafter import ngram
from real.drafter.chains import chain_accepts, chain_starts
from real.drafter.checkpoint import load_drafter
from real.drafter.eagle import EagleDrafter, load_target
from real.drafter.eagle3 import Eagle3Drafter
from real.drafter.records import HiddenRecord
from real.drafter.training import DrafterTrainConfig, featurize_records, train_records

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
    by `hidden_records`. `drafter_dir`: a saved EAGLE or EAGLE-3 head to go on training
    (`load_drafter`: ours or a public one), else a fresh `EagleDrafter.from_target` initialised
    from `seed` (the global torch RNG is left as
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
        return featurize_records(self.target, sequences, self.config.max_len,
                                 self.config.batch_size, self.drafter.aux_layers)

    # ------------------------------------------------------------ training

    def train_until(self, stop: threading.Event, records: Sequence[HiddenRecord],
                    max_steps: int | None = None) -> SpotResult:
        """Train on seeded minibatches of `records` (drawn with replacement) until `stop` is
        set, `max_steps` steps are done, or at once when no record has 2 tokens. `stop` is
        checked before each drafter step; nothing else is waited on."""
        t0 = time.perf_counter()
        data = [r for r in records if len(r.token_ids) >= 2]
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
            parts = train_records(self.drafter, self.optimizer, [data[i] for i in idx],
                                  self.config, self.generator)
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
        self.drafter.share_target(target)
        self.target = target

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
                            drafter: EagleDrafter | Eagle3Drafter | None = None,
                            stop: threading.Event | None = None) -> float:
        """Expected tokens per verify pass with a chain draft of `k` tokens under greedy
        verification: 1 + the mean number of leading draft tokens the target accepts.

        At each start position t of a record (up to `max_starts` per record, evenly spaced) the
        drafter runs as vLLM's EAGLE / EAGLE-3 proposer does (real/drafter/chains.py): its
        context is the pairs (target state at i, token[i+1]) for i <= t, then k steps
        autoregressively, each feeding back its own output and argmax token at the next position.
        Draft token j is accepted when all before it were and it equals the target's argmax
        after position t+j. That reference is the target's greedy choice only while the
        record's own tokens follow the accepted drafts; where a sampled record leaves them, its
        hidden states say nothing about the greedy path and the chain is cut there. So the
        estimate is exact on greedy records and a lower bound on sampled ones.

        `drafter`: judge another drafter on this target (default: the one being trained), e.g.
        `static_drafter(state)`. `stop`: when set, the estimate gives up between two records and
        returns NaN (an idle worker judging drafters is stopped when the rollout ends)."""
        drafter = drafter or self.drafter
        drafter.eval()
        accepted = []
        for ids, inputs, ref, starts in chain_starts(drafter, records, k, max_starts):
            if stop is not None and stop.is_set():
                return float("nan")
            accepted.append(chain_accepts(drafter, ids, inputs, ref, starts, k))
        return 1.0 + torch.cat(accepted).float().mean().item()

    def static_drafter(self, state: dict[str, torch.Tensor]) -> EagleDrafter | Eagle3Drafter:
        """A drafter with the weights `state` on this trainer's current target (its embedding and LM
        head, as vLLM shares the reloaded target's): e.g. the run's initial drafter, never
        trained."""
        drafter = self.drafter.on_target(self.target)
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
        for ids, _, ref, starts in chain_starts(self.drafter, records, k, max_starts):
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
                    # as in chain_accepts: the next reference holds only if the record went on
                    # with d
                    if j < k and tokens[t + j + 1] != d:
                        break
                counts.append(count)
            accepted.append(torch.as_tensor(counts, dtype=torch.long))
        return 1.0 + torch.cat(accepted).float().mean().item()


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
    for name, first in states[0].items():
        if not first.is_floating_point():  # an EAGLE-3 head's vocabulary maps: never trained
            out[name] = first
            continue
        acc = sum(s[name].to(torch.float32) * w for s, w in used)
        out[name] = acc.to(first.dtype)
    return out


def _as_target(target: str | Path | nn.Module) -> nn.Module:
    if isinstance(target, (str, Path)):
        return load_target(target)
    target.eval().requires_grad_(False)
    return target
