"""The RL-step simulator: SimPy orchestrates workers, spot trainers and phases.

One RL step: every worker decodes its shard of prompts x group size with
continuous batching; a worker that has finished waits (a bubble) or, once
enough workers are idle, trains the drafter until the last worker finishes,
when it is preempted; then the policy trains and weights are synced. Models
of lengths, costs, acceptance and drafter learning are pure functions
(`sim.lengths`, `sim.costs`, `sim.acceptance`, `sim.drafter`); this module
only decides when things happen.

Random numbers: lengths come from (seed, step) alone, so every policy sees the
same responses (common random numbers); bandits and acceptance noise have
their own streams per worker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import simpy

from sim.acceptance import AcceptStats, stats_for
from sim.costs import draft_step_s, prefill_s, train_phase_s, verify_step_s
from sim.drafter import DrafterState, active_kind, after_policy_update, after_training, initial_state
from sim.engine import EngineBatch
from sim.lengths import StepLengths, sample_step
from sim.results import PolicyRun, StepMetrics, Timeline, step_metrics
from workbench.bandit import SD_OFF_BUCKET, Bandit, make_bandit
from workbench.policy import Policy
from workbench.profile import Profile
from workbench.workload import Workload

# Stream ids for numpy SeedSequence([seed, stream, index]).
_LENGTHS, _BANDIT, _NOISE = 0, 1, 2


def step_lengths(workload: Workload, seed: int, step: int) -> StepLengths:
    rng = np.random.default_rng([seed, _LENGTHS, step])
    return sample_step(workload.lengths, workload.max_response_tokens, workload.prompts_per_step,
                       workload.group_size, step, rng)


def shard(n: int, workers: int) -> list[range]:
    """Contiguous shards (groups stay on one worker where they fit), as veRL splits a batch."""
    bounds = np.linspace(0, n, workers + 1).round().astype(int)
    return [range(bounds[w], bounds[w + 1]) for w in range(workers)]


@dataclass
class _Rollout:
    """What the workers of one rollout share."""

    step: int
    kind: str  # drafter in use
    accept: dict[int, AcceptStats]  # draft length -> tokens per verify pass
    done: simpy.Event  # the last worker finished decoding
    spot_open: simpy.Event  # enough workers are idle to start spot training
    idle_workers: int = 0
    trained_tokens: float = 0.0


class Simulator:
    def __init__(self, workload: Workload, policy: Policy, profile: Profile, seed: int = 0):
        self.workload, self.policy, self.profile, self.seed = workload, policy, profile, seed
        self.env = simpy.Environment()
        self.timeline = Timeline()
        self.bandits: list[Bandit] = [make_bandit(policy, [seed, _BANDIT, w]) for w in range(workload.workers)]
        self.noise = [np.random.default_rng([seed, _NOISE, w]) for w in range(workload.workers)]
        self.drafter: DrafterState = initial_state(policy)
        self.draft_lens = sorted({0, *policy.bandit.arms, *(row.draft_len for row in policy.schedule)})
        self._learning = policy.bandit.algorithm != "fixed"

    def run(self, steps: int | None = None, on_step: Callable[[StepMetrics], None] | None = None) -> PolicyRun:
        n = steps if steps is not None else self.workload.steps
        meta: list[tuple[StepLengths, str, float, float]] = []
        self.env.process(self._rl_steps(n, meta))
        self.env.run()
        df = self.timeline.frame()
        metrics = []
        for step, rows in df.groupby("step", sort=True):
            lengths, kind, quality, trained = meta[step]
            m = step_metrics(step, rows, self.workload.workers, lengths.lengths,
                             self.workload.max_response_tokens, kind, quality, trained)
            metrics.append(m)
            if on_step:
                on_step(m)
        return PolicyRun(self.policy.name, metrics, df)

    def _rl_steps(self, steps: int, meta: list):
        wl, env = self.workload, self.env
        for step in range(steps):
            lengths = step_lengths(wl, self.seed, step)
            kind = active_kind(self.policy, self.profile, self.drafter)
            accept = {k: stats_for(self.profile.acceptance, kind, self.drafter.quality, k) for k in self.draft_lens}
            ro = _Rollout(step, kind, accept, env.event(), env.event())
            quality = self.drafter.quality
            shards = shard(len(lengths.lengths), wl.workers)
            decoders = [env.process(self._decode(w, ro, lengths.lengths[list(s)].tolist())) for w, s in enumerate(shards)]
            waiters = [env.process(self._after_shard(w, ro, decoders[w])) for w in range(wl.workers)]
            yield simpy.AllOf(env, decoders)
            ro.done.succeed()
            yield simpy.AllOf(env, waiters)

            response_tokens = int(lengths.lengths.sum())
            self.drafter = after_training(self.drafter, self.policy, self.profile, ro.trained_tokens, response_tokens)
            meta.append((lengths, kind, quality, ro.trained_tokens))

            tokens = response_tokens + wl.prompt_tokens * len(lengths.lengths)
            yield from self._phase(step, "train", train_phase_s(self.profile.phases, tokens, wl.gpus))
            yield from self._phase(step, "sync", self.profile.phases.weight_sync_s)
            self.drafter = after_policy_update(self.drafter, self.profile)

    def _phase(self, step: int, state: str, seconds: float):
        start = self.env.now
        yield self.env.timeout(seconds)
        for w in range(self.workload.workers):
            self.timeline.add(step, w, start, self.env.now, state)

    def _decode(self, w: int, ro: _Rollout, lengths: list[int]):
        """Worker w decodes its shard, one segment of constant batch (or one bandit decision) at a time."""
        env, dec, prof = self.env, self.profile.decode, self.profile
        bandit, noise = self.bandits[w], self.noise[w]
        engine = EngineBatch(lengths, self.workload.prompt_tokens, self.workload.max_batch)
        interval = self.policy.bandit.decision_interval
        while not engine.done:
            prefill = prefill_s(dec, engine.admit())
            batch = engine.batch
            arm = bandit.select(batch) if ro.kind != "none" else None
            k = arm.draft_len if arm else 0
            stats = ro.accept[k]
            need = engine.tokens_to_next_finish()
            passes = need / stats.mean
            learning = self._learning and arm is not None and arm.bucket != SD_OFF_BUCKET
            if learning:
                passes = min(passes, interval)
            accept_len = stats.mean
            if stats.var > 0 and passes > 0:
                # The mean of passes*batch verify outcomes: the reward the bandit sees is noisy.
                sd = math.sqrt(stats.var / (passes * batch))
                accept_len = min(k + 1.0, max(1.0, accept_len + sd * noise.standard_normal()))
                passes = min(need / accept_len, interval) if learning else need / accept_len
            context = engine.mean_context() + passes * accept_len / 2
            decode_s = passes * (verify_step_s(dec, batch, context, k) + draft_step_s(prof.drafter, ro.kind, batch, k))
            tokens = passes * accept_len * batch
            start = env.now
            yield env.timeout(prefill + decode_s)
            self.timeline.add(ro.step, w, start, env.now, "decode_sd" if k else "decode", batch, k, tokens, passes * batch)
            if arm is not None and decode_s > 0:
                bandit.update(arm, tokens / decode_s)
            engine.advance(passes * accept_len)
        return env.now

    def _after_shard(self, w: int, ro: _Rollout, decoder: simpy.Process):
        """Worker w once its shard is done: idle, and spot-train the drafter when allowed, until the rollout ends."""
        env, training = self.env, self.policy.training
        yield decoder
        finished = env.now
        ro.idle_workers += 1
        if training.enabled and ro.idle_workers >= training.min_idle_workers and not ro.spot_open.triggered:
            ro.spot_open.succeed()
        yield (ro.spot_open | ro.done) if training.enabled else ro.done
        self.timeline.add(ro.step, w, finished, env.now, "idle")
        if ro.done.triggered:
            return
        # Spot training until the rollout ends, which preempts it: only whole
        # drafter steps count, the one cut short is dropped, never waited for,
        # so the rollout is never delayed.
        learn = self.profile.learning
        step_s = learn.tokens_per_step / (learn.train_tokens_per_s * self.workload.gpus_per_worker)
        start = env.now
        yield ro.done
        ro.trained_tokens += math.floor((env.now - start) / step_s) * learn.tokens_per_step
        self.timeline.add(ro.step, w, start, env.now, "drafter_train")


def simulate(workload: Workload, policy: Policy, profile: Profile, seed: int = 0, steps: int | None = None,
             on_step: Callable[[StepMetrics], None] | None = None) -> PolicyRun:
    return Simulator(workload, policy, profile, seed).run(steps, on_step)
