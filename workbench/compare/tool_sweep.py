"""How the answer moves with tool latency: the same agentic workload with every tool call 0.1x to
10x as slow (Workload.agentic.tool_latency_scale), each policy against the first at each scale.

Every scale meets the same trajectories and tool draws (common random numbers: a scale multiplies
the latencies, it draws nothing), so the curve's shape is the tools' doing alone. Written as
`tool_latency.json` and `tool_latency.png` beside `tlt compare`'s own files; the What-if page draws
the same chart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib.figure import Figure

from sim.sweep import ProgressFn, Runner, sweep
from workbench.compare.agentic import agentic_why
from workbench.contracts.fileio import save_result
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.workload import Workload

SCHEMA = "tlt-tool-latency/1"
SCALES = (0.1, 0.3, 1.0, 3.0, 10.0)


@dataclass(frozen=True)
class ScalePoint:
    """One tool-latency scale: per policy its mean step time and speedup against the first, and the
    first policy's agentic split."""

    scale: float
    step_s: dict[str, float]
    speedup: dict[str, float]
    tool_share: float
    tool_wait_share: float
    tail_share: float


@dataclass(frozen=True)
class ToolSweep:
    workload: str
    profile: str
    policies: list[str]
    seeds: list[int]
    points: list[ScalePoint]

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "workload": self.workload, "profile": self.profile,
                "reference_policy": self.policies[0], "seeds": self.seeds,
                "points": [p.__dict__ for p in self.points]}

    def figure(self) -> Figure:
        """Speedup against tool latency per policy; the reference's time in tools beside it."""
        fig = Figure(figsize=(10.0, 4.0), layout="constrained")
        ax, ax2 = fig.subplots(1, 2)
        x = [p.scale for p in self.points]
        for i, name in enumerate(self.policies[1:], 1):
            ax.plot(x, [p.speedup[name] for p in self.points], "o-", color=f"C{i % 10}",
                    label=name)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("tool latency (x the workload's)")
        ax.set_ylabel(f"speedup vs {self.policies[0]}")
        ax.set_title("Each policy's speedup")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        ax2.plot(x, [100 * p.tool_share for p in self.points], "o-",
                 label="trajectory time in tools")
        ax2.plot(x, [100 * p.tool_wait_share for p in self.points], "s-",
                 label="engine time waiting on tools")
        ax2.plot(x, [100 * p.tail_share for p in self.points], "^-",
                 label="engine time at a small batch")
        ax2.set_xscale("log")
        ax2.set_xlabel("tool latency (x the workload's)")
        ax2.set_ylabel("% (reference policy)")
        ax2.set_title(f"Where {self.policies[0]}'s time goes")
        ax2.legend(fontsize=8)
        ax2.grid(alpha=0.3)
        lo, hi = min(x), max(x)
        fig.suptitle(f"{self.workload} on {self.profile}: tools {lo:g}x to {hi:g}x as slow",
                     fontsize=10)
        return fig

    def save(self, out_dir: str | Path) -> tuple[Path, Path]:
        return save_result(out_dir, "tool_latency", json.dumps(self.to_dict(), indent=2) + "\n",
                           self.figure())


def tool_latency_sweep(workload: Workload, policies: Sequence[Policy], profile: Profile,
                       scales: Sequence[float] = SCALES, seeds: int | Sequence[int] = 1,
                       steps: int | None = None, on_progress: ProgressFn | None = None,
                       runner: Runner = sweep) -> ToolSweep:
    """Every policy at every scale (the workload's own scale times each), over `seeds`."""
    if not workload.agentic.enabled:
        raise ValueError(f"workload {workload.name!r} is not agentic: a tool-latency sweep needs "
                         "tool calls (agentic.enabled)")
    points, seed_ids = [], []
    ref = policies[0].name
    for s in scales:
        a = workload.agentic
        wl = replace(workload, agentic=replace(a, tool_latency_scale=a.tool_latency_scale * s))
        step: dict[str, list[float]] = {}
        whys = []
        for r in runner(wl, policies, profile, seeds, steps, on_progress):
            step.setdefault(r.policy.name, []).append(r.run.mean("step_time_s"))
            seed_ids.append(r.seed)
            if r.policy.name == ref:
                whys.append(agentic_why(r.run))
        mean = {k: float(np.mean(v)) for k, v in step.items()}
        points.append(ScalePoint(float(s), mean, {k: mean[ref] / v for k, v in mean.items()},
                                 float(np.mean([w.tool_share for w in whys])),
                                 float(np.mean([w.tool_wait_share for w in whys])),
                                 float(np.mean([w.tail_share for w in whys]))))
    return ToolSweep(workload.name, profile.name, [p.name for p in policies],
                     sorted(set(seed_ids)), points)
