"""The `tlt` command groups; each command module registers its commands on them."""

from __future__ import annotations

import warnings

import typer

from workbench.contracts.schema import Notice

app = typer.Typer(
    help="TLT Workbench: simulate, calibrate, tune and run TLT for long-tail RL rollouts.",
    no_args_is_help=True, add_completion=False)
bench_app = typer.Typer(
    help="Benchmarks (they print a table and, last, one line of JSON).", no_args_is_help=True)
model_app = typer.Typer(
    help="Our own tiny reasoning model: build, train, save.", no_args_is_help=True)
drafter_app = typer.Typer(
    help="The EAGLE drafter: train it on the target's own rollouts.", no_args_is_help=True)
workload_app = typer.Typer(
    help="Workloads from real response lengths: import, show.", no_args_is_help=True)
task_app = typer.Typer(
    help="RL tasks as files `tlt train --task` reads (prompt, answer, solution).",
    no_args_is_help=True)
runlog_app = typer.Typer(
    help="veRL run logs: extract their metrics to ship, the transfer table of the shipped ones.",
    no_args_is_help=True)
app.add_typer(bench_app, name="bench")
app.add_typer(model_app, name="model")
app.add_typer(drafter_app, name="drafter")
app.add_typer(workload_app, name="workload")
app.add_typer(task_app, name="task")
app.add_typer(runlog_app, name="runlog")


def _notice(message, category, filename, lineno, file=None, line=None) -> None:
    """A notice (a renamed preset or field, a study's abandoned trials) is a line on stderr, not a
    Python warning with a file and line."""
    if issubclass(category, Notice):
        typer.echo(f"notice: {message}", err=True)
    else:
        _SHOW(message, category, filename, lineno, file, line)


_SHOW = warnings.showwarning


@app.callback()
def _main() -> None:
    """TLT Workbench: simulate, calibrate, tune and run TLT for long-tail RL rollouts."""
    warnings.simplefilter("always", Notice)
    warnings.showwarning = _notice
