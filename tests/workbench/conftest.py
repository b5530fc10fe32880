"""Fixtures of the tools' tests: a synthetic engine that writes traces (no vLLM).

`synthetic_trace(...)` is a token-level stand-in for a vLLM engine, for calibration tests.

Each engine does continuous batching step by step, as vLLM does: waiting
requests are admitted up to `max_batch` and prefilled in one step (emitting
their first token); decoding requests draft `K` tokens from the Dynamic SD
schedule (by the number of requests scheduled), each accepting the first `a`
with P(a >= i) = alpha ** (i ** shape); a step takes exactly the simulator's
cost form (sim/costs.py) times lognormal noise, with some outliers, slower
warm-up steps and a fixed host gap between steps. `shared_acceptance`: every
request of a step accepts the same number of drafts, drawn from a low-discrepancy
sequence, so the batch moves in step and at the mean pace, as the simulator's does
(a run "consistent with the simulator"). Response lengths come from
a LengthModel through `sim.lengths.sample_step`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import pytest

from sim.costs import draft_step_s, prefill_s, verify_step_s
from sim.lengths import sample_step
from sim.rollout import shard
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile, load_profile
from workbench.contracts.schema import from_mapping
from workbench.contracts.trace import Trace
from workbench.contracts.workload import LengthModel


@dataclass
class _FakeEngine:
    """One engine's continuous batching, step by step (see the module docstring)."""

    profile: Profile
    policy: Policy
    max_batch: int
    samples: int
    cap: int
    noise: float
    outliers: float
    warmup: int
    gap_s: float
    shared_acceptance: bool
    rng: np.random.Generator

    def draft_len(self, batch: int) -> int:
        pol = self.policy
        if pol.drafter.kind == "none" or batch > pol.sd_threshold:
            return 0
        for row in pol.schedule:
            if row.min_batch <= batch <= row.max_batch:
                return row.draft_len
        return 0

    def step_cost(self, rl: int, n: int, b: int, ctx: float, k: int, p: int) -> float:
        prof, rng = self.profile, self.rng
        cost = (
            verify_step_s(prof.decode, b, ctx, k)
            + draft_step_s(prof.drafter, self.policy.drafter.kind, b, k)
            + prefill_s(prof.decode, p)
        )
        cost *= float(np.exp(self.noise * rng.standard_normal()))
        if rng.random() < self.outliers:
            cost *= 3.0
        if rl == 0 and n < self.warmup:
            cost *= 2.0
        return cost

    def run(
        self,
        rl: int,
        w: int,
        idx: list[int],
        lens: np.ndarray,
        correct: np.ndarray,
        plen: np.ndarray,
        t0: float,
        steps: list[dict],
        reqs: list[dict],
    ) -> float:
        """Serve requests `idx` of RL step `rl` on engine `w` from time t0; append its steps and
        finished requests; return the end of its last step."""
        acc = self.profile.acceptance
        kind = self.policy.drafter.kind
        alpha, shape = (
            (acc.ngram_alpha, acc.ngram_shape)
            if kind == "ngram"
            else (acc.eagle_alpha_fresh, acc.eagle_shape)
        )
        waiting = list(idx)
        running: list[int] = []
        gen = {i: 0 for i in idx}
        t, n = t0, 0
        while waiting or running:
            room = self.max_batch - len(running)
            new, waiting = waiting[:room], waiting[room:]
            decoding = list(running)
            b = len(decoding)
            k = self.draft_len(b + len(new)) if b else 0
            ctx = float(np.mean([plen[i] + gen[i] for i in decoding])) if b else 0.0
            p = int(sum(plen[i] for i in new))
            cost = self.step_cost(rl, n, b, ctx, k, p)
            per_pos = np.zeros(k, np.int64)
            emitted = 0
            r = np.array([alpha ** (j ** shape) for j in range(1, k + 1)])
            u_step = (0.5 + n * 0.6180339887498949) % 1.0  # low-discrepancy: the mean shows quickly
            for i in decoding:
                a = (
                    int(np.sum((u_step if self.shared_acceptance else self.rng.random()) < r))
                    if k
                    else 0
                )
                per_pos[:a] += 1
                step_tokens = min(1 + a, int(lens[i]) - gen[i])
                gen[i] += step_tokens
                emitted += step_tokens
            for i in new:
                gen[i] += 1
                emitted += 1
            steps.append(
                dict(
                    rl_step=rl,
                    worker=w,
                    engine_step=n,
                    start_s=t,
                    wall_s=cost,
                    batch_size=b + len(new),
                    num_waiting=len(waiting),
                    prefill_requests=len(new),
                    prefill_tokens=p,
                    decode_requests=b,
                    scheduled_tokens=b * (k + 1) + p,
                    context_mean=ctx,
                    context_max=int(max([plen[i] + gen[i] for i in decoding], default=0)),
                    draft_len=k,
                    num_drafts=b if k else 0,
                    num_draft_tokens=b * k,
                    num_accepted_tokens=int(per_pos.sum()),
                    accepted_per_pos=per_pos.tolist(),
                    new_tokens=emitted,
                )
            )
            t += cost
            for i in new + decoding:
                if gen[i] >= lens[i]:
                    reqs.append(
                        dict(
                            rl_step=rl,
                            worker=w,
                            request_id=f"{rl}-{i}",
                            prompt_id=i // self.samples,
                            sample=i % self.samples,
                            prompt_tokens=int(plen[i]),
                            response_tokens=int(lens[i]),
                            finish_reason="length" if lens[i] >= self.cap else "stop",
                            start_s=t0,
                            end_s=t,
                            reward=float(correct[i]),
                        )
                    )
            running = [i for i in decoding + new if gen[i] < lens[i]]
            t += self.gap_s
            n += 1
        return t - self.gap_s


def _synthetic_trace(
    profile: Profile,
    policy: dict,
    *,
    prompts: int,
    samples: int,
    cap: int,
    workers: int,
    max_batch: int,
    lengths: LengthModel = LengthModel(clip_ratio=0.05, sigma=0.8),
    rl_steps: int = 1,
    prompt_len: int = 48,
    noise: float = 0.03,
    outliers: float = 0.01,
    warmup: int = 2,
    gap_s: float = 0.0005,
    seed: int = 0,
    shared_acceptance: bool = False,
    replay: list[np.ndarray] | None = None,
) -> Trace:
    rng = np.random.default_rng(seed)
    engine = _FakeEngine(
        profile,
        from_mapping(Policy, policy),
        max_batch,
        samples,
        cap,
        noise,
        outliers,
        warmup,
        gap_s,
        shared_acceptance,
        rng,
    )
    steps, reqs, rls = [], [], []
    t0 = 0.0
    for rl in range(rl_steps):
        if replay is not None:
            lens, correct = np.asarray(replay[rl]), np.ones(len(replay[rl]), bool)
        else:
            sl = sample_step(lengths, cap, prompts, samples, rl, rng)
            lens, correct = sl.lengths, sl.correct
        plen = rng.integers(prompt_len // 2, prompt_len * 3 // 2 + 1, len(lens))
        ends = [engine.run(rl, w, list(rg), lens, correct, plen, t0, steps, reqs)
                for w, rg in enumerate(shard(len(lens), workers))]
        rollout = max(ends) - t0
        rls.append(
            dict(rl_step=rl, rollout_s=rollout, train_s=0.0, sync_s=0.0, drafter_train_s=0.0)
        )
        t0 += rollout + 1.0
    meta = dict(
        model="fake-tiny",
        policy=policy,
        prompts=prompts,
        samples=samples,
        max_tokens=cap,
        seed=seed,
        machine={"cpu": "fake"},
        engine={"max_num_seqs": max_batch, "drafter": engine.policy.drafter.kind},
    )
    return Trace(meta, pd.DataFrame(steps), pd.DataFrame(reqs), pd.DataFrame(rls))


@pytest.fixture(scope="session")
def synthetic_machine() -> Profile:
    """The "machine" the synthetic engine runs on: cpu-tiny's form with costs a fit must find."""
    base = load_profile("cpu-tiny")
    return replace(
        base,
        decode=replace(
            base.decode,
            overhead_s=0.005,
            per_seq_s=1.5e-4,
            compute_s_per_token=3.0e-5,
            kv_s_per_token=2.0e-7,
            prefill_s_per_token=3.0e-5,
        ),
        drafter=replace(
            base.drafter, ngram_s_per_seq=4.0e-5, eagle_step_s=0.002, eagle_s_per_seq=6.0e-5
        ),
        acceptance=replace(
            base.acceptance,
            ngram_alpha=0.65,
            ngram_shape=0.6,
            eagle_alpha_fresh=0.8,
            eagle_shape=0.7,
        ),
    )


@pytest.fixture(scope="session")
def synthetic_trace():
    """A Trace from an engine whose step costs are the profile's own cost form (plus noise):
    `synthetic_trace(profile, policy_mapping, prompts=, samples=, cap=, workers=, max_batch=, ...)`
    """
    return _synthetic_trace


# ------------------------------------------------------------ synthetic `tlt train` run directories

def _synthetic_run(
    out,
    profile: Profile,
    policy: dict,
    *,
    prompts: int = 6,
    samples: int = 4,
    cap: int = 256,
    workers: int = 2,
    max_batch: int = 16,
    rl_steps: int = 4,
    spot_s: tuple[float, ...] = (),
    drafter_steps: tuple[int, ...] = (),
    eagle_est: tuple[float, ...] = (),
    static_est: tuple[float, ...] = (),
    other_s: float = 0.1,
    seed: int = 0,
):
    """A run directory as `tlt train --out` writes it (metrics.csv, trace/ with a timeline), from
    the synthetic engine: rollouts at the profile's step costs, updates taking exactly the profile's
    `train_gpu_s_per_token` x prompt+response tokens / GPUs, syncs its `weight_sync_s`, `spot_s[t]`
    seconds of drafter_train on worker 0 in step t doing `drafter_steps[t]` steps, and the given
    drafter estimates (NaN where not given). A policy that spot-trains also waits the profile's
    `spot_stop_s` for its trainers to stop (metrics.csv stop_latency_s) and syncs `drafter_sync_s`
    more."""
    from pathlib import Path

    from workbench.contracts.fileio import write_atomic
    from workbench.contracts.trace import write_trace

    t = _synthetic_trace(
        profile,
        policy,
        prompts=prompts,
        samples=samples,
        cap=cap,
        workers=workers,
        max_batch=max_batch,
        rl_steps=rl_steps,
        noise=0.01,
        outliers=0.0,
        warmup=0,
        seed=seed,
        shared_acceptance=True,
    )
    tokens = t.requests.groupby("rl_step")[["prompt_tokens", "response_tokens"]].sum().sum(axis=1)
    t.rl_steps["train_s"] = [
        profile.phases.train_gpu_s_per_token * tokens[s] / workers for s in t.rl_steps["rl_step"]
    ]
    trains = bool(policy.get("spot_training", {}).get("enabled", False))
    stop_s = profile.phases.spot_stop_s if trains else float("nan")
    t.rl_steps["sync_s"] = profile.phases.weight_sync_s + (
        profile.phases.drafter_sync_s if trains else 0.0
    )
    t.rl_steps["drafter_train_s"] = [
        spot_s[s] if s < len(spot_s) else 0.0 for s in t.rl_steps["rl_step"]
    ]
    rows = []
    for s in t.rl_steps.itertuples():
        st = t.steps[t.steps["rl_step"] == s.rl_step]
        t0, end = float(st["start_s"].min()), float((st["start_s"] + st["wall_s"]).max())
        for w in range(workers):
            e = st[st["worker"] == w]
            w_end = float((e["start_s"] + e["wall_s"]).max())
            rows.append(
                dict(
                    rl_step=s.rl_step,
                    worker=w,
                    start_s=t0,
                    end_s=w_end,
                    state="decode",
                    batch=int(e["batch_size"].max()),
                    draft_len=0,
                    tokens=0.0,
                    passes=float(len(e)),
                    context=0.0,
                    strategy="",
                )
            )
            spot = spot_s[s.rl_step] if w == 0 and s.rl_step < len(spot_s) else 0.0
            if spot > 0:
                n = drafter_steps[s.rl_step] if s.rl_step < len(drafter_steps) else 0
                rows.append(
                    dict(
                        rl_step=s.rl_step,
                        worker=w,
                        start_s=w_end,
                        end_s=w_end + spot,
                        state="drafter_train",
                        batch=0,
                        draft_len=0,
                        tokens=float(n),
                        passes=0.0,
                        context=0.0,
                        strategy="",
                    )
                )
            rows.append(
                dict(
                    rl_step=s.rl_step,
                    worker=w,
                    start_s=w_end + spot,
                    end_s=max(end, w_end + spot),
                    state="idle",
                    batch=0,
                    draft_len=0,
                    tokens=0.0,
                    passes=0.0,
                    context=0.0,
                    strategy="",
                )
            )
    t.timeline = pd.DataFrame(rows)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_trace(t, out / "trace")

    def pick(seq, i):
        return seq[i] if i < len(seq) else float("nan")

    kind = policy.get("drafter", {}).get("kind", "none")
    wait = 0.0 if math.isnan(stop_s) else stop_s
    metrics = pd.DataFrame(
        [
            dict(
                rl_step=s.rl_step,
                step_s=s.rollout_s + s.train_s + s.sync_s + wait + other_s,
                rollout_s=s.rollout_s,
                train_s=s.train_s,
                sync_s=s.sync_s,
                stop_latency_s=stop_s,
                mean_accept_len=1.0,
                drafter_kind=kind,
                drafter_steps=int(pick(drafter_steps, s.rl_step))
                if s.rl_step < len(drafter_steps)
                else 0,
                tokens=int(t.requests[t.requests["rl_step"] == s.rl_step]["response_tokens"].sum()),
                eagle_est=pick(eagle_est, s.rl_step),
                static_est=pick(static_est, s.rl_step),
            )
            for s in t.rl_steps.itertuples()
        ]
    )
    write_atomic(out / "metrics.csv", metrics.to_csv(index=False))
    return out


@pytest.fixture(scope="session")
def synthetic_run():
    """`synthetic_run(out_dir, profile, policy_mapping, ...)`: a `tlt train` run directory whose
    phases follow the profile's forms (see `_synthetic_run`)."""
    return _synthetic_run
