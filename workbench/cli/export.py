"""`tlt export`: a policy as the file a real team's stack reads (vLLM, SGLang / FastRL, veRL)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from workbench.cli.apps import app
from workbench.cli.common import fail
from workbench.contracts.fileio import write_atomic
from workbench.contracts.policy import load_policy
from workbench.contracts.schema import ConfigError
from workbench.deploy.export import (
    DEFAULT_MAX_NUM_SEQS,
    TARGETS,
    ExportError,
    check_out,
    export_policy,
)


@app.command("export")
def export_cmd(
    policy: str = typer.Argument(...,
                                 help="Policy preset name or YAML/JSON file "
                                      "(e.g. a tuned one from `tlt tune`)."),
    to: str = typer.Option(..., "--to", help=f"Target: {', '.join(TARGETS)}."),
    out: Path = typer.Option(...,
                             help="File to write: vllm and verl a YAML file, sglang a bash file."),
    drafter: Optional[str] = typer.Option(
        None, help="The drafter an eagle policy needs: an EAGLE or EAGLE-3 checkpoint directory, "
                   "or a Hugging Face hub id (owner/name; checked where this machine's cache "
                   "holds it, else written as it is)."),
    model: Optional[str] = typer.Option(
        None, help="The target model (directory or hub id): the drafter's hidden size, "
                   "vocabulary and layers are checked against it."),
    drafter_method: Optional[str] = typer.Option(
        None, help="eagle or eagle3 (vLLM's names), where the drafter's files cannot say (a hub "
                   "id not in the cache whose name does not either)."),
    max_num_seqs: int = typer.Option(
        DEFAULT_MAX_NUM_SEQS, min=1,
        help="The engine's batch limit: vLLM's per-batch "
             "table is closed there (vLLM's default 256)."),
) -> None:
    """Export a policy to vLLM, SGLang / FastRL or veRL.

    vLLM: `vllm serve --config`; SGLang / FastRL: server arguments and FastRL's trainer overrides;
    veRL: a rollout config fragment. What the target cannot express is written in the file as
    comments and on stderr; what it would run differently is refused."""
    try:
        pol = load_policy(policy)
        result = export_policy(pol, to, drafter, max_num_seqs, model, drafter_method)
        check_out(to, out)
    except (ConfigError, ExportError) as exc:
        fail(exc)
    write_atomic(out, result.text)
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"wrote {out} (policy {pol.name} for {to}; {len(result.notes)} notes)")
