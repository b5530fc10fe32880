"""What `tlt compare` adds for a workload whose lengths are assumed: each policy's speedup again
with the length model at the ends of its declared range (workbench.paper.tail_sensitivity.py)."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from sim.sweep import Runner
from workbench.paper.tail_sensitivity import STEPS, assumed, tail_sensitivity
from workbench.contracts.fileio import write_json
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.workload import Workload
from workbench.report.tables import format_table

TAIL_RANGE_OPTION = typer.Option(
    True, "--tail-range/--no-tail-range",
    help="Also: each policy's speedup with the length model at the ends of its declared range "
         f"(the body's spread, the tail's reach to the cap; {STEPS} steps, the first seed).")


def print_tail_sensitivity(wl: Workload, pols: list[Policy], prof: Profile, seed: int,
                           out: Path, runner: Runner) -> None:
    """`tlt compare`'s answer again over the length model's declared range (or why not)."""
    why = assumed(wl)
    if why or len(pols) < 2:
        typer.echo(f"tail shape: not varied ({why or 'one policy: nothing to compare'})")
        return
    t0 = time.perf_counter()
    ts = tail_sensitivity(wl, pols, prof, [seed], STEPS, lambda done, total, name, s: typer.echo(
        f"  tail: [{done}/{total}] {name}  ({time.perf_counter() - t0:.1f}s)", err=True), runner)
    write_json(out / "tail_sensitivity.json", ts.to_dict())
    names = ts.policies
    typer.echo(f"How much of each speedup rests on the tail's shape (lengths assumed: the length "
               f"model at the ends of its declared range, traces/published/calibration-split.yaml; "
               f"the median correct answer kept; {ts.steps} steps, seed {seed}):")
    typer.echo(format_table(
        [[p.label, f"{p.sigma:g}", f"{p.wrong_factor:g}", f"{p.clip_ratio:.2%}",
          f"{p.step_s[names[0]]:,.1f}", *(f"{p.speedup[n]:.2f}x" for n in names[1:])]
         for p in ts.points],
        ["length model", "sigma", "wrong_factor", "at the cap", f"{names[0]} step s",
         *names[1:]]))
    typer.echo("over the range: " + "; ".join(
        f"{n} {ts.span(n)[0]:.2f}-{ts.span(n)[1]:.2f}x" for n in names[1:])
        + f" (wrote {out}/tail_sensitivity.json)")
