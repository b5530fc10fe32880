"""`tlt sd-curve`: SD's predicted speedup at each batch size on one engine, where it stops paying,
and what that means for a policy (workbench/compare/sd_curve.py). The last stdout line is JSON."""

from __future__ import annotations

import json
from typing import Optional

import typer

from workbench.cli.apps import app
from workbench.cli.common import fail
from workbench.contracts.schema import ConfigError
from workbench.report.tables import format_table

BATCHES = "1,2,4,8,16,32,64,128,256,512"
EXPANSION = "; batch expansion re-reads the KV cache per verified token"
ENGINE_VERSION = typer.Option(
    None, help="The engine release to price (e.g. 0.4.4 for SGLang, 0.10.1.1 for vLLM): its "
    "CUDA-graph capture sizes per pass and its verify (traces/published/engine-versions.yaml; "
    "default: the profile's, for --arch the database's release).")
GRAPH_MAX = typer.Option(
    None, min=0, help="Cap every pass's CUDA graphs at this batch, as --cuda-graph-max-bs does "
    "(0: no graphs, every pass eager).")
DRAFT_VOCAB = typer.Option(
    None, min=1, help="The drafter's own vocabulary (EAGLE-3 heads: 32000; default: the "
    "target's, read in full by every draft forward).")
EP_HELP = ("A mixture-of-experts model's expert parallelism inside the engine (default: the "
           "framework's, EP1: experts tensor-parallel, as vLLM and SGLang run them).")


def parse_strategy(text: str):
    """`chain:3`, `3` or a tree `8_4_16`."""
    from workbench.contracts.strategy import Strategy

    t = text.strip()
    try:
        return Strategy.parse(t.split(":", 1)[1] if t.startswith("chain:") else t)
    except ValueError:
        raise ConfigError(
            "--strategy",
            "strategy",
            text,
            "chain:K (e.g. chain:3), K, or a tree steps_topk_tokens (e.g. 8_4_16); several "
            "comma-separated (e.g. 1,2,3,4,8_4_16)",
        ) from None


def parse_strategies(text: str) -> tuple:
    """One strategy or several, comma-separated, each as `parse_strategy` reads it."""
    out = tuple(parse_strategy(t) for t in text.split(","))
    if len(set(out)) != len(out):
        raise ConfigError("--strategy", "strategy", text, "distinct strategies, e.g. 1,2,3,4")
    return out


def parse_accept(text: Optional[str], quality: float):
    """`--accept 2.79` (tokens per verify pass at --strategy) or `--accept 0.8,0.64,0.51`
    acceptance by draft position); absent: the profile's acceptance model at `quality`."""
    from workbench.compare.sd_curve import Acceptance

    if text is None:
        return Acceptance(quality=quality)
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(
            "--accept",
            "accept",
            text,
            "tokens per pass (e.g. 2.79) or cumulative acceptance by position (e.g. 0.8,0.64,0.51)",
        ) from None
    if len(values) == 1 and values[0] >= 1.0:
        return Acceptance(tokens_per_pass=values[0], quality=quality)
    return Acceptance(positions=values, quality=quality)


def parse_batches(text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in text.split(","))
    except ValueError:
        out = ()
    if not out or min(out) < 1 or max(out) > 4096:
        raise ConfigError(
            "--batches", "batches", text, "comma-separated batch sizes from 1 to 4096, e.g. 1,8,64"
        )
    return out


def engine_profile(profile: Optional[str], arch: Optional[str], gpu: str, tp: int, framework: str,
                   ep: Optional[int] = None):
    """A profile preset/file, or the measured database's profile of (arch, gpu, tp, framework,
    ep), kept on disk."""
    from workbench.calibrate.database.catalog import disk_cached_profile, model_choices
    from workbench.cli.profile import default_base
    from workbench.contracts.profile import load_profile

    if profile is not None:
        return load_profile(profile)
    if arch is None:
        raise ConfigError(
            "--arch/--profile",
            "arch",
            None,
            "--arch MODEL (a preset such as qwen2.5-7b, a package "
            "config name such as meta-llama/Meta-Llama-3.1-8B, or a config.json) or --profile NAME",
        )
    path = model_choices().get(arch, arch)
    return disk_cached_profile(path, gpu, tp, framework, default_base("cuda", path, tp), ep)


def with_engine(prof, version: Optional[str], graph_max: Optional[int],
                draft_vocab: Optional[int]):
    """The profile priced for another release of its engine, graphs capped, or another drafter
    vocabulary (`--engine-version`, `--graph-max`, `--draft-vocab`)."""
    from dataclasses import replace

    from workbench.calibrate.database.engine_versions import repriced

    if version is None and graph_max is None and draft_vocab is None:
        return prof
    m = prof.mechanisms
    if m is None:
        raise ConfigError(
            "--engine-version/--graph-max/--draft-vocab", "profile", prof.name,
            "a profile that knows its engine release (one derived with --arch, or a file with "
            "`mechanisms`, docs/formats.md); this one prices no release's mechanisms")
    share = None
    if draft_vocab is not None:
        from workbench.contracts.architecture import load_architecture
        from workbench.calibrate.database.catalog import model_choices

        vocab = load_architecture(model_choices().get(prof.cluster.model, prof.cluster.model)).vocab
        share = min(1.0, draft_vocab / vocab)
    tp = prof.cluster.tp if prof.cluster is not None else 1
    return replace(prof, mechanisms=repriced(m, version, graph_max, share, tp))


def _print_curve(c, prof) -> None:
    rows = [
        [
            str(p.batch),
            f"{p.plain_ms:.2f}",
            f"{p.verify_ms:.2f}",
            f"{p.draft_ms:.2f}",
            f"{p.speedup:.2f}",
            f"{p.speedup_over_off:.2f}",
        ]
        for p in c.points
    ]
    typer.echo(
        format_table(
            rows, ["batch", "plain ms", "verify ms", "draft+host ms", "speedup", "vs SD-off arm"]
        )
    )
    typer.echo(c.answer(prof.mechanisms))
    typer.echo("Per bucket (a strategy that pays at every batch of its bucket; off above the "
               "threshold):")
    typer.echo(
        format_table(
            [
                [
                    f"{b.min_batch}-{b.max_batch}",
                    b.strategy if b.strategy != "0" else "off",
                    f"{b.speedup:.2f}",
                ]
                for b in c.buckets
            ],
            ["batch", "strategy", "mean speedup"],
        )
    )


def engine_line(m) -> str:
    """The engine release the curve prices, and what it does to a speculative pass."""
    if m is None:
        return ("engine release: not recorded in this profile (no CUDA-graph limits, eager "
                "launches or per-step host work priced)")
    unit = "tokens" if m.graphs_by_tokens else "sequences"
    cap = (f"; SD caps running requests at {m.sd_running_cap} unless --max-running-requests is "
           "set (RL frameworks set it; the curve assumes so)" if m.sd_running_cap else "")
    return (f"engine release: {m.label}; CUDA graphs (in {unit}) plain to {m.plain_graph_max}, "
            f"verify to {m.verify_graph_max}, draft steps to {m.draft_graph_max}, draft extend "
            f"to {m.extend_graph_max}; an eager target forward launches in "
            f"{1e3 * m.target_launch_s:.1f} ms, a draft step in {1e3 * m.draft_launch_s:.2f} ms; "
            f"host work {1e3 * m.host_s_per_seq_step:.4f} ms per sequence per draft step"
            f"{EXPANSION if m.kv_read_per_token else ''}{cap}")


def _print_curves(c) -> None:
    """Several strategies side by side: SD's speedup over plain decoding, and the best per batch."""
    rows = [[str(b), f"{ms:.2f}"] + [f"{x.points[i].speedup:.2f}" for x in c.curves]
            + [c.best[i] if c.best[i] != "0" else "off"]
            for i, (b, ms) in enumerate(zip(c.batches, c.plain_ms))]
    heads = [f"{x.strategy} ({x.accepted:.2f})" for x in c.curves]
    typer.echo("speedup over plain decoding per strategy (tokens per verify pass in brackets):")
    typer.echo(format_table(rows, ["batch", "plain ms"] + heads + ["best"]))
    top = max(256, max(c.batches))
    for x in c.curves:
        where = f"from batch {x.crossover_batch}" if x.crossover_batch else f"nowhere up to {top}"
        typer.echo(f"{x.strategy}: stops paying {where}")


def _print_many(prof, drafter: str, context: int, many) -> None:
    typer.echo(f"{prof.name}: {prof.description or prof.source}"[:300])
    typer.echo(f"drafter {drafter}, context {context}; speedup over an engine without a "
               f"drafter; the SD pass's host work {1e3 * prof.drafter.sd_host_s_per_seq:.3f} "
               "ms a sequence")
    _print_curves(many)
    typer.echo(json.dumps(many.as_json()))


def print_moe_contrast(m) -> None:
    """On a mixture-of-experts engine: the experts each pass reads, SD's speedup beside a dense
    engine of the same active size, and why they differ (workbench/compare/moe_sd.py)."""
    typer.echo(format_table(
        [[str(r.batch), f"{r.decode_experts:.0f}", f"{r.verify_experts:.0f}",
          f"{r.expert_read_ratio:.2f}", f"{r.speedup:.2f}", f"{r.dense_speedup:.2f}"]
         for r in m.rows],
        ["batch", f"experts read: decode (of {m.count})", f"verify ({m.verified} tok/seq)",
         "verify/decode", "speedup", "dense, same active size"]))
    typer.echo(m.sentence())


def _policy_checks(context: float) -> None:
    from workbench.calibrate.database.catalog import PRESET_CASES
    from workbench.contracts.policy import load_policy
    from workbench.contracts.profile import load_profile
    from workbench.compare.sd_curve import policy_check

    rows = []
    for case in PRESET_CASES:
        prof = load_profile(case.name)
        for name in ("tlt", "tlt-base", "tlt-vllm"):
            c = policy_check(prof, load_policy(name), context)
            rows.append(
                [
                    c.profile,
                    c.policy,
                    str(c.sd_threshold),
                    c.strategy,
                    f"{c.accepted:.2f}",
                    str(c.crossover_batch or "-"),
                    c.verdict,
                ]
            )
    typer.echo(
        format_table(
            rows, ["profile", "policy", "threshold", "top bucket", "E[L]", "crossover", "verdict"]
        )
    )


@app.command("sd-curve")
def sd_curve_cmd(
    arch: Optional[str] = typer.Option(
        None,
        help="Model: a preset (qwen2.5-7b, llama3.1-8b, ...), a package config "
        "name (meta-llama/Meta-Llama-3.1-8B) or a config.json path.",
    ),
    gpu: str = typer.Option(
        "h100", help="GPU of the measured database (h100, h200, b200, a100, ...)."
    ),
    tp: int = typer.Option(1, min=1, help="Tensor-parallel degree of one engine."),
    framework: str = typer.Option("sglang", help="sglang or vllm."),
    ep: Optional[int] = typer.Option(None, min=1, help=EP_HELP),
    profile: Optional[str] = typer.Option(
        None, help="A profile preset or file instead of --arch/--gpu/--tp/--framework."
    ),
    drafter: str = typer.Option("eagle", help="eagle or ngram."),
    strategy: str = typer.Option(
        "chain:3", help="chain:K (K drafts, K + 1 verified) or a tree steps_topk_tokens; several "
        "comma-separated (e.g. 1,2,3,4,5,6,7,8,8_4_16) print their curves side by side with the "
        "best per batch."
    ),
    accept: Optional[str] = typer.Option(
        None,
        help="Tokens per verify pass at --strategy (its first, if several; e.g. 2.79), or "
        "cumulative acceptance by position (e.g. 0.8,0.64,0.51); default: the profile's model.",
    ),
    quality: float = typer.Option(
        1.0,
        min=0.0,
        max=1.0,
        help="The learned drafter's quality for the profile's "
        "acceptance model (1: aligned with the policy).",
    ),
    context: int = typer.Option(
        2048, min=0, help="Tokens per sequence (prompt and response so far)."
    ),
    batches: str = typer.Option(
        BATCHES, help="Batch sizes to print (the crossover is searched at every batch)."
    ),
    check_policies: bool = typer.Option(
        False,
        help="Also check the shipped TLT policies' thresholds against the "
        "crossover each shipped measured-database profile predicts.",
    ),
    engine_version: Optional[str] = ENGINE_VERSION,
    graph_max: Optional[int] = GRAPH_MAX,
    draft_vocab: Optional[int] = DRAFT_VOCAB,
) -> None:
    """SD's speedup over plain decoding at each batch size on one engine, the batch where it stops
    paying, and the sd_threshold and per-bucket strategies that implies; with several strategies,
    their curves side by side and the best per batch. The last line is JSON: batch, speedup,
    crossover_batch, stops_because (several: batch, curves, best)."""
    from workbench.compare.moe_sd import moe_contrast
    from workbench.compare.sd_curve import sd_curve, sd_curves

    try:
        ss, bs = parse_strategies(strategy), parse_batches(batches)
        acc = parse_accept(accept, quality)
        prof = with_engine(engine_profile(profile, arch, gpu, tp, framework, ep), engine_version,
                           graph_max, draft_vocab)
        if len(ss) > 1:
            acc.check(ss[0])
            _print_many(prof, drafter, context, sd_curves(prof, drafter, ss, acc, float(context),
                                                          bs))
            return
        c = sd_curve(prof, drafter, ss[0], acc, float(context), bs)
        moe = moe_contrast(prof, c.kind, ss[0], c.accepted, float(context), bs)
    except (ConfigError, ValueError) as exc:
        fail(exc)
    _print_one(prof, drafter, context, c, moe, check_policies)


def _print_one(prof, drafter: str, context: int, c, moe, check_policies: bool) -> None:
    typer.echo(f"{prof.name}: {prof.description or prof.source}"[:300])
    typer.echo(
        f"drafter {drafter}, strategy {c.strategy}, {c.accepted:.2f} tokens per verify pass, "
        f"context {context}; speedup over an engine without a drafter (the SD-off arm of an EAGLE "
        "engine still runs one drafter forward per step); the SD pass's host work "
        f"{1e3 * prof.drafter.sd_host_s_per_seq:.3f} ms a sequence"
    )
    typer.echo(engine_line(prof.mechanisms))
    _print_curve(c, prof)
    if moe is not None:
        print_moe_contrast(moe)
    if check_policies:
        _policy_checks(float(context))
    typer.echo(json.dumps(c.as_json()))
