"""The tail checked, drawn: completion curves (the share of responses done against the share of
the rollout's time), measured beside simulated, one panel per measurement."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from matplotlib.figure import Figure

GRID = np.linspace(0.0, 1.0, 201)


@dataclass(frozen=True)
class Curve:
    label: str
    done: np.ndarray  # share done at each GRID point


@dataclass(frozen=True)
class Panel:
    title: str
    measured: list[Curve] = field(default_factory=list)  # full measured curves (a trace's)
    points: tuple[tuple[float, float], ...] = ()  # measured points (a source's figures)
    simulated: list[Curve] = field(default_factory=list)


def tail_figure(panels: list[Panel]) -> Figure:
    """One panel per measurement; measured in black, simulated in colour."""
    fig = Figure(figsize=(5.0 * len(panels), 4.2), constrained_layout=True)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, p in zip(axes, panels):
        for i, c in enumerate(p.measured):
            ax.step(GRID, c.done, where="post", color="black", lw=1.4,
                    label="measured" if i == 0 else None)
        if p.points:
            t, f = zip(*p.points)
            ax.plot(t, f, "ko", ms=7, label="measured")
        for i, c in enumerate(p.simulated):
            ax.step(GRID, c.done, where="post", lw=1.0, alpha=0.8, color=f"C{i % 10}",
                    label=c.label)
        ax.set_title(p.title, fontsize=9)
        ax.set_xlabel("share of the rollout's time")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5, loc="lower right")
    axes[0].set_ylabel("share of responses done")
    return fig
