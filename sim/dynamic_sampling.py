"""DAPO's dynamic sampling (Workload.dynamic_sampling): a step trains only on mixed-reward groups.

With `sync` and `async` rollouts a step decodes rounds of new groups, each in full, keeping the
mixed-reward ones until the update's batch is full (or `max_rounds` ran); the step pays for all.
With `partial` and `tail_batching` it decodes one over-provisioned round, stopped once enough
mixed groups are complete. Every generation batch is recorded (`FilterRecord`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from sim.entities import Group
from sim.results import FilterRecord
from sim.rounds import Decoded, Rollouts


class FilteredRollouts(Rollouts):
    """`Rollouts` whose steps keep only mixed-reward groups."""

    def decode_step(self, step: int):
        if self.policy.rollout.mode in ("sync", "async"):
            return (yield from self.filtered_rounds(step))
        d = yield from super().decode_step(step)
        return replace(d, trained=self.keep_mixed(step, d.groups, d.trained))

    def keep_mixed(self, step: int, groups: list[Group], trained: list[Group]) -> list[Group]:
        """The first prompts_per_step complete mixed-reward groups (the rest are dropped, paid
        for)."""
        p, complete = self.workload.prompts_per_step, {id(g) for g in trained}
        mixed = [i for i, g in enumerate(groups) if g.mixed and id(g) in complete]
        used = mixed[:p]
        self.filtering.append(FilterRecord(self.batches, step + 1, 1, len(groups),
                                           self.workload.group_size, p, 0, mixed, used))
        self.batches += 1
        return [groups[i] for i in used]

    def filtered_rounds(self, step: int):
        """Rounds of ceil(prompts x oversample) new groups, each decoded in full, keeping the
        mixed-reward groups until the update's batch is full (or max_rounds ran)."""
        p, ds = self.workload.prompts_per_step, self.workload.dynamic_sampling
        mode = self.policy.rollout.mode
        launch = math.ceil(p * ds.oversample - 1e-9)
        kept: list[Group] = []
        first = None  # the first round: its drafter and quality describe the step
        spot_tokens = 0.0
        for r in range(ds.max_rounds):
            batch, self.batches = self.batches, self.batches + 1
            groups = self.new_groups(step, launch, 0, batch)
            result = yield from self.round(step, groups, None, mode)
            first = result if first is None else first
            spot_tokens += result.spot_tokens
            mixed = [i for i, g in enumerate(groups) if g.mixed and g.complete]
            used = mixed[:max(0, p - len(kept))]
            self.filtering.append(FilterRecord(batch, step + 1, r + 1, launch,
                                               self.workload.group_size, p, len(kept), mixed,
                                               used))
            kept += [groups[i] for i in used]
            if len(kept) >= p:
                break
        return Decoded(groups, kept, 0, launch * (r + 1), first.kind, first.quality,
                       spot_tokens, mode)
