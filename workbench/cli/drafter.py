"""`tlt drafter`: train an EAGLE or EAGLE-3 head for a target (`train`), write an EAGLE head in
SafeAILab's public layout (`convert`), and say what a drafter is and whether it fits a target
(`check`: real/drafter/resolve.py). Torch is imported when `train` and `convert` run."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer

from real.drafter.layout import EAGLE, METHODS, DrafterError
from real.drafter.resolve import resolve_drafter
from real.hub_cache import HubCacheError, local_model
from real.tiny import task
from real.torch_utils import train_device
from workbench.cli.apps import drafter_app
from workbench.cli.common import fail


@drafter_app.command("train")
def drafter_train(
    model: Path = typer.Option(..., help="Target model directory."),
    out: Path = typer.Option(
        ..., help="Drafter checkpoint directory to write (the layout vLLM loads for the method)."
    ),
    method: str = typer.Option(EAGLE, help="The head: eagle (EagleLlamaForCausalLM) or eagle3 "
                                           "(LlamaForCausalLMEagle3, SafeAILab's and SpecForge's "
                                           "layout)."),
    draft_vocab: Optional[int] = typer.Option(
        None, min=1, help="eagle3: the draft vocabulary's size (the rollouts' most frequent "
                          "tokens; default the whole vocabulary)."),
    steps: int = typer.Option(300, min=1, help="Optimiser steps."),
    seed: int = typer.Option(0, help="Seed of the prompts, the sampling, the initial weights and "
                                     "the batches."),
    prompts: int = typer.Option(32, min=1, help="Prompts to sample the target on (real.tiny.task "
                                                "problems)."),
    samples: int = typer.Option(4, min=1,
                                help="Responses per prompt: one greedy, the rest sampled."),
    max_tokens: int = typer.Option(256, min=1, help="Response cap of the training rollouts."),
    lr: float = typer.Option(1e-3, min=0.0, help="AdamW learning rate (cosine decay to a tenth, "
                                                 "20 warm-up steps)."),
    mix: str = typer.Option("default",
                            help="Difficulty mix of the task prompts (real/tiny/task.py)."),
    temperature: float = typer.Option(1.0, min=0.0, help="Temperature of the sampled responses."),
    device: str = typer.Option("cpu",
                               help="Where the drafter trains: cpu, or cuda (bf16 autocast)."),
) -> None:
    """Sample the target, then train an EAGLE head (EAGLE loss) or an EAGLE-3 head (training-time
    test) on its hidden states."""
    from real.drafter.from_target import train_from_target

    if not (model / "config.json").is_file():
        fail(ValueError(f"--model {model}: no config.json (give a Hugging Face model directory)"))
    if mix not in task.MIXES:
        fail(ValueError(f"--mix {mix!r}: allowed: {', '.join(task.MIXES)}"))
    if method not in METHODS:
        fail(ValueError(f"--method {method!r}: give {' or '.join(METHODS)}"))
    try:
        train_device(device)
    except ValueError as exc:
        fail(exc)
    t0 = time.perf_counter()
    path = train_from_target(model, out, steps=steps, seed=seed, prompts=prompts, samples=samples,
                             max_tokens=max_tokens, lr=lr, mix=mix, temperature=temperature,
                             log=lambda m: typer.echo(m, err=True), device=device, method=method,
                             draft_vocab=draft_vocab)
    info = json.loads((path / "tlt_drafter.json").read_text())
    final = info.get("final", {})
    loss, top1 = final.get("loss", float("nan")), final.get("top1", float("nan"))
    typer.echo(f"wrote {path} in {time.perf_counter() - t0:.0f}s: loss {loss:.4f}, "
               f"top-1 agreement with the target {top1:.3f} (last 50 steps)")


@drafter_app.command("convert")
def drafter_convert(
    drafter: Path = typer.Argument(..., help="An EAGLE head's directory (e.g. "
                                             "traces/reference/drafter)."),
    model: Path = typer.Option(..., help="Its target model directory."),
    out: Path = typer.Option(..., help="Directory to write."),
    layout: str = typer.Option("public", help="public: SafeAILab's EAGLE layout "
                                              "(LlamaForCausalLM, pytorch_model.bin); tlt: "
                                              "EagleLlamaForCausalLM, model.safetensors."),
) -> None:
    """Write an EAGLE head again in another layout vLLM loads (the same tensors)."""
    from real.drafter.checkpoint import LAYOUTS, load_drafter, save_drafter
    from real.drafter.eagle import load_target

    if layout not in LAYOUTS:
        fail(ValueError(f"--layout {layout!r}: give {' or '.join(LAYOUTS)}"))
    try:
        target = load_target(local_model(model))
        head = load_drafter(drafter, target)
    except (HubCacheError, ValueError) as exc:
        fail(exc)
    if head.method != EAGLE:
        fail(ValueError(f"{drafter}: an {head.method} head is written in its one public layout "
                        "already"))
    extra = {"converted_from": str(drafter), "layout": layout}
    source = drafter / "tlt_drafter.json"
    if source.is_file():
        extra["source_info"] = json.loads(source.read_text())
    save_drafter(head, out, target.config, extra=extra, layout=layout)
    typer.echo(f"wrote {out} ({layout} layout of {drafter})")


@drafter_app.command("check")
def drafter_check(
    drafter: str = typer.Argument(..., help="A drafter directory or hub id (owner/name)."),
    model: Optional[str] = typer.Option(None, help="Its target: a directory or hub id (checks "
                                                   "hidden size, vocabulary, layers)."),
    method: Optional[str] = typer.Option(None, help="eagle or eagle3, where the files cannot say "
                                                    "(a hub id not in the cache)."),
) -> None:
    """What a drafter is (vLLM's method, architecture) and what was and was not checked offline."""
    try:
        ref = resolve_drafter(drafter, model, method)
    except DrafterError as exc:
        fail(exc)
    typer.echo(f"{ref.given}: method {ref.method}, vLLM is given {ref.model}")
    for line in ref.checked:
        typer.echo(f"  checked: {line}")
    for line in ref.unchecked:
        typer.echo(f"  not checked: {line}")
