"""Why SD stops paying at a batch: which of the engine's mechanisms ends its gain there.

A speculative pass of strategy S at batch B saves (E[L] - 1) plain steps and costs, beyond one plain
step, five things (sim/costs.py prices each):

- `graphs`: its passes run eager where the engine release captures no CUDA graph for them (net of
  a plain step's own eager launching);
- `host_seq`: the host's work per sequence that speculating does not overlap with the GPU;
- `host_step`: the host's work per sequence and draft step (batch x draft length);
- `verify`: the verify pass over B x (K + 1) tokens beyond a plain step's B (compute-bound at large
  B x (K + 1); batch expansion's KV re-reads);
- `drafting`: the drafter's forwards and its work once a pass.

SD loses when their sum exceeds the saving. At the crossover the costs just match the saving, so
any one of them removed would let SD pay; what ends the gain is the mechanism whose cost grew most
as a share of the saving between batch 1, where SD pays most, and the crossover (`why_stops`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.costs import draft_step_s, verify_step_s
from workbench.contracts.engine_mechanisms import MAX_GRAPH, EngineMechanisms
from workbench.contracts.policy import DrafterKind
from workbench.contracts.profile import Profile
from workbench.contracts.strategy import Strategy

MECHANISMS = ("graphs", "host_seq", "host_step", "verify", "drafting")


@dataclass(frozen=True)
class StopReason:
    """At one batch, SD's costs beyond a plain step by mechanism (seconds), its saving, and the
    mechanism that ends its gain."""

    batch: int
    strategy: str
    accepted: float
    plain_s: float  # one plain step
    sd_s: float  # one SD pass
    saved_s: float  # (E[L] - 1) plain steps
    costs: dict[str, float]
    mechanism: str
    shares_at_1: dict[str, float]  # each cost over the saving, at batch 1

    def share(self, mechanism: str) -> float:
        return self.costs[mechanism] / self.saved_s if self.saved_s > 0 else float("inf")

    @property
    def deficit_s(self) -> float:
        return self.sd_s - self.accepted * self.plain_s

    def sentence(self, m: EngineMechanisms | None) -> str:
        what = describe(self.mechanism, self.batch, Strategy.parse(self.strategy), m)
        k = self.mechanism
        return (f"{what}: at batch {self.batch} it costs {1e3 * self.costs[k]:.2f} ms a pass, "
                f"{self.share(k):.0%} of what SD with {self.strategy} ({self.accepted:.2f} tokens "
                f"a pass) saves, against {self.shares_at_1[k]:.0%} at batch 1 (all of SD's costs: "
                f"{1e3 * sum(self.costs.values()):.2f} ms against {1e3 * self.saved_s:.2f} ms "
                "saved)")


def describe(mechanism: str, batch: int, s: Strategy, m: EngineMechanisms | None) -> str:
    """The mechanism in words, with the engine's numbers where they say why."""
    if mechanism == "graphs" and m is not None:
        size = m.graph_size(batch, s.verify_tokens)
        unit = "tokens" if m.graphs_by_tokens else "sequences"
        return (f"passes run eager above {m.label}'s CUDA-graph capture sizes (a verify of {size} "
                f"{unit}; SD graphs to {m.verify_graph_max}, plain to {m.plain_graph_max})")
    return {
        "graphs": "passes run eager above the engine's CUDA-graph capture sizes",
        "host_seq": "the host's work per sequence, which speculating does not overlap with the GPU",
        "host_step": f"the host's work per sequence and draft step ({batch} x {s.steps})",
        "verify": (f"the verify pass over {batch} x {s.verify_tokens} = {batch * s.verify_tokens} "
                   "tokens, compute-bound where a plain step is not"),
        "drafting": f"drafting ({s.steps} drafter steps over the batch, its LM head included)",
    }[mechanism]


def _all_graphs(m: EngineMechanisms | None) -> EngineMechanisms | None:
    if m is None:
        return None
    return replace(m, plain_graph_max=MAX_GRAPH, verify_graph_max=MAX_GRAPH,
                   draft_graph_max=MAX_GRAPH, extend_graph_max=MAX_GRAPH)


def pass_costs(prof: Profile, kind: DrafterKind, batch: int, context: float, strategy: Strategy,
               accepted: float) -> tuple[dict[str, float], float, float, float]:
    """SD's costs beyond a plain step by mechanism, the saving, a plain step and an SD pass."""
    c, d, m = prof.decode, prof.drafter, prof.mechanisms
    g = _all_graphs(m)
    plain, plain_g = (verify_step_s(c, batch, context, 0, x) for x in (m, g))
    ver, ver_g = (verify_step_s(c, batch, context, strategy, x) for x in (m, g))
    dr, dr_g = (draft_step_s(d, kind, batch, strategy, x) for x in (m, g))
    host_seq = d.sd_host_s_per_seq * batch + d.sd_step_s
    host_step = m.host_s_per_seq_step * batch * strategy.steps if m is not None else 0.0
    costs = {
        "graphs": (ver - ver_g) + (dr - dr_g) - (plain - plain_g),
        "host_seq": host_seq,
        "host_step": host_step,
        "verify": ver_g - plain_g,
        "drafting": dr_g - host_seq - host_step,
    }
    return costs, (accepted - 1.0) * plain, plain, ver + dr


def why_stops(prof: Profile, kind: DrafterKind, batch: int, context: float, strategy: Strategy,
              accepted: float) -> StopReason:
    """SD's costs at `batch` by mechanism, and the one that ends its gain (module docstring)."""
    costs, saved, plain, sd = pass_costs(prof, kind, batch, context, strategy, accepted)
    first, saved_1, _, _ = pass_costs(prof, kind, 1, context, strategy, accepted)
    at_1 = {k: v / saved_1 if saved_1 > 0 else float("inf") for k, v in first.items()}
    growth = {k: (costs[k] / saved if saved > 0 else float("inf")) - at_1[k] for k in MECHANISMS}
    pick = max(MECHANISMS, key=lambda k: growth[k])
    return StopReason(batch, strategy.name, accepted, plain, sd, saved, costs, pick, at_1)
