"""The check's short Markdown summary, from its result document alone (no torch): what ran, what
each section measured, in a few tables. The comparison with the measured database and the TLT
paper is `tlt gpu-check --measured FILE`, at home."""

from __future__ import annotations

from typing import Any

from real.gpu_check import moe_summary


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    if not rows:
        return []
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows] + [""]


def _f(v: Any, fmt: str = ".3g") -> str:
    return "-" if v is None else format(v, fmt) if isinstance(v, (int, float)) else str(v)


def _machine(doc: dict) -> list[str]:
    m = doc.get("machine", {})
    smi = m.get("nvidia_smi") or {}
    after = (doc.get("machine_after") or {}).get("nvidia_smi") or {}
    gpu = (
        (
            f"{m['gpu']}, {m.get('memory_gib')} GiB, {m.get('multiprocessors')} SMs, "
            f"compute {m.get('capability')}, "
            f"driver {smi.get('driver_version', '?')}"
        )
        if m.get("gpu")
        else "no GPU"
    )
    clocks = (
        (
            f"; clocks SM {smi.get('clocks.sm', '?')} MHz (max {smi.get('clocks.max.sm', '?')}), "
            f"memory {smi.get('clocks.mem', '?')} MHz at the start, SM "
            f"{after.get('clocks.sm', '?')} MHz at the end, "
            f"power limit {smi.get('power.limit', '?')} W"
        )
        if smi and "error" not in smi
        else ""
    )
    return [
        f"- Machine: {gpu}{clocks}; CPU {m.get('cpu')} ({m.get('cpu_count')} cores); Python "
        f"{m.get('python')}, torch {m.get('torch')} (CUDA {m.get('torch_cuda')}), transformers "
        f"{m.get('transformers')}."
    ]


def _sections(doc: dict) -> list[str]:
    rows = [
        [
            name,
            s.get("status"),
            _f(s.get("seconds"), ".1f"),
            _f(s.get("peak_gib")),
            (s.get("error") or "")[:120].replace("|", "/"),
        ]
        for name, s in doc.get("sections", {}).items()
    ]
    return table(["section", "status", "seconds", "peak GiB", "error"], rows)


def _correctness(s: dict) -> list[str]:
    if "grpo" not in s and "drafter" not in s:
        return []
    rows = []
    g = s.get("grpo") or {}
    for i, (r, c) in enumerate(zip(g.get("reference", []), g.get("candidate", []))):
        rows.append(
            [f"GRPO step {i + 1} loss", _f(r["loss"], ".6f"), _f(c["loss"], ".6f"), "", "", ""]
        )
    if g:
        rows.append(
            [
                "GRPO weights",
                "",
                "",
                _f(g.get("update_cosine"), ".4f"),
                _f(g.get("update_rel_distance")),
                g.get("passed"),
            ]
        )
    d = s.get("drafter") or {}
    if d:
        rows.append(
            [
                "drafter step loss",
                _f(d["reference"]["loss"], ".6f"),
                _f(d["candidate"]["loss"], ".6f"),
                _f(d.get("update_cosine"), ".4f"),
                _f(d.get("update_rel_distance")),
                d.get("passed"),
            ]
        )
        p = d.get("packed_vs_padded") or {}
        rows.append(
            [
                "drafter packed vs padded (CPU float32)",
                _f(d["reference"]["loss"], ".6f"),
                _f(p.get("packed", {}).get("loss"), ".6f"),
                _f(p.get("update_cosine"), ".6f"),
                _f(p.get("update_rel_distance")),
                p.get("passed"),
            ]
        )
    tol = g.get("tolerance") or {}
    return [
        "## Correctness",
        "",
        f"Reference: {s.get('reference_path')}; candidate: {s.get('candidate_path')}. "
        f"Tolerance (bf16): |loss difference| <= {tol.get('loss_abs')} + "
        f"{tol.get('loss_rel')} x |loss|, "
        f"cosine of the weight updates >= {tol.get('min_update_cosine')}.",
        "",
    ] + table(
        ["check", "reference", "candidate", "update cosine", "update distance", "passed"], rows
    )


_PATH_WORDS = {
    "packed": "packed",
    "packed_per_span": "packed, attention per sequence without cuDNN",
    "packed_sdpa_default": "packed, attention per sequence with torch's default kernel",
}


def _path_rows(s: dict, what: str, unit: str, base: str, peak: Any) -> list[list[Any]]:
    """One row per packed path of a training section: its rate beside the base path's."""
    ratios, used = s.get(f"ratio_to_{base}") or {}, s.get("attention_by_path") or {}
    rows = []
    for path, words in _PATH_WORDS.items():
        if f"{path}_{unit}_per_s" not in s and path != "packed":
            continue
        label = what if path == "packed" else f"{what}: {words}"
        rows.append(
            [
                label + (f" [attention {used[path]}]" if path in used else ""),
                _f(s.get(f"{path}_{unit}_per_s"), ".1f"),
                _f(s.get(f"{base}_{unit}_per_s"), ".1f"),
                f"{unit}/s",
                _f(ratios.get(path, s.get("speedup") if path == "packed" else None)),
                _f(peak),
            ]
        )
    return rows


def _throughput(sections: dict) -> list[str]:
    rows = []
    for s in sections.values():
        base = "padded" if s.get("kind") == "grpo" else "plain"
        peak = (s.get("peak_gib_by_path") or {}).get(base)
        if s.get("kind") == "grpo" and "tokens" in s:
            what = (
                f"GRPO update, {s['model']} ({s['sequences']} seq, {s['tokens']} tokens, padded "
                f"{s['padded_tokens']} in forwards of {s.get('padded_micro', s['minibatch'])})"
            )
            rows += _path_rows(s, what, "tokens", "padded", peak)
        if s.get("kind") == "drafter" and "batch" in s:
            what = (
                f"drafter spot training, {s['target']} hidden {s['hidden']} "
                f"(batch {s['batch']}, {s.get('tokens_per_batch')} tokens, "
                f"padded {_f(s.get('padded_tokens_per_batch'), '.1f')})"
            )
            rows += _path_rows(s, what, "samples", "plain", peak)
    if not rows:
        return []
    return ["## Training throughput", ""] + table(
        ["what", "packed", "padded", "unit", "ratio", "peak GiB padded"], rows
    )


def _attention(s: dict) -> list[str]:
    """The packed-attention section: per row shape, each backend's times and agreement."""
    lines = ["## Packed attention (one layer, forward and backward)", ""]
    sdp = s.get("sdp") or {}
    if sdp:
        names = sdp.get("backend_names") or {}
        order = [names.get(str(x), names.get(x, x)) for x in sdp.get("priority_order") or []]
        lines += [
            f"SDPA kernel order {', '.join(map(str, order)) or '?'}; cuDNN "
            f"{sdp.get('cudnn_version')}; rows with new lengths (fresh) against one row again "
            "(same); differences relative to the per-span backend's largest value.",
            "",
        ]
    for sh in s.get("shapes", []):
        rows = []
        for name, b in (sh.get("backends") or {}).items():
            diff = b.get("max_rel_diff") or {}
            rows.append(
                [
                    name,
                    b.get("status", "")[:160].replace("|", "/"),
                    ", ".join(b.get("ops", []))[:160],
                    _f(b.get("first_ms"), ".2f"),
                    _f(b.get("fresh_ms"), ".2f"),
                    _f(b.get("same_ms"), ".2f"),
                    " / ".join(_f(diff.get(k), ".1e") for k in ("out", "dq", "dk", "dv")),
                ]
            )
        head = (
            f"{sh['label']} ({sh['heads']} heads, {sh['kv_heads']} KV, head {sh['head_dim']}, "
            f"{sh['sequences']} sequences, {sh.get('tokens_per_row')} tokens)"
        )
        lines += [f"### {head}", ""] + table(
            ["backend", "status", "operators", "first ms", "fresh ms", "same ms",
             "rel. diff out / dq / dk / dv"],
            rows,
        )
    return lines


def _ms(modes: dict) -> str:
    """'graph / eager' milliseconds of one point."""
    return " / ".join(_f(1e3 * modes[m]["step_s"], ".3f") for m in ("graph", "eager") if m in modes)


def _pivot(points: dict, op: str, row: int, col: int, label: str) -> list[str]:
    """One op's points as a table: rows by key position `row`, columns by `col`."""
    keys = [k for k in points if k[0] == op]
    if not keys:
        return []
    rows, cols = sorted({k[row] for k in keys}), sorted({k[col] for k in keys})
    cell = {(k[row], k[col]): _ms(points[k]) for k in keys}
    return table(
        [label] + [str(c) for c in cols], [[r] + [cell.get((r, c), "") for c in cols] for r in rows]
    )


def _engine_run(r: dict) -> list[str]:
    rows = r.get("rows") or []
    head = f"### {r.get('label')}: {r.get('status')}" + (
        f", {r['seconds']} s" if "seconds" in r else ""
    )
    if not rows:
        return [head, "", r.get("error", ""), ""]
    points: dict[tuple, dict] = {}
    for x in rows:  # key: op, batch, context, tokens, topk
        points.setdefault((x["op"], x["batch"], x["context"], x["tokens"], x["topk"]), {})[
            x["mode"]
        ] = x
    out = [head, ""] + (
        [f"Graph capture failed: {r['graph_error'][:200]}", ""] if r.get("graph_error") else []
    )
    modes = "graph / eager ms" if any("graph" in m for m in points.values()) else "eager ms"
    out += _pivot(points, "decode", 1, 2, f"decode {modes}: B \\ context")
    for c in sorted({k[2] for k in points if k[0] == "verify"}):
        sub = {k: v for k, v in points.items() if k[0] == "verify" and k[2] == c}
        out += _pivot(sub, "verify", 3, 1, f"verify at context {c}, {modes}: tokens \\ B")
    drafts = {k: v for k, v in points.items() if k[0] == "drafter"}
    out += table(
        [f"EAGLE draft step ({r.get('arch')} TP{r.get('tp')})", modes],
        [[f"B={k[1]} x top-k {k[4]}", _ms(v)] for k, v in sorted(drafts.items())],
    )
    other = []
    for k, v in points.items():
        m = v.get("graph") or v.get("eager")
        if k[0] == "prefill":
            other.append(f"prefill {k[3]} tokens {_ms(v)} ms")
        elif k[0] in ("train_fwd", "train_fwd_bwd", "drafter_train"):
            other.append(f"{k[0]} {1e6 * m['step_s'] / (k[1] * k[3]):.2f} us/token")
        elif k[0] == "whole":
            other.append(
                f"whole model B={k[1]} C={k[2]}: {1e3 * m['whole_s']:.3f} ms measured whole, "
                f"{1e3 * m['step_s']:.3f} ms as layers x layer + head"
            )
    return out + ([f"- {x}" for x in other] + [""] if other else [])


def _engine(sections: dict) -> list[str]:
    runs = [r for s in sections.values() if s.get("kind") == "engine" for r in s.get("runs", [])]
    if not runs:
        return []
    lines = ["## Engine costs (one rank: layers x one layer + head; profiler, random weights)", ""]
    for r in runs:
        lines += _engine_run(r)
    return lines


def markdown(doc: dict) -> str:
    m = doc.get("machine", {})
    what = m.get("gpu") or "CPU"
    state = (
        f"finished {doc['finished_at']}"
        if doc.get("finished_at")
        else "unfinished (stopped or still running)"
    )
    lines = [
        f"# GPU check: {what}, {str(doc.get('started_at', ''))[:10]}",
        "",
        f"- `{doc.get('tool')}`, {'quick (tiny shapes)' if doc.get('quick') else 'full'} plan on "
        f"{doc.get('device')}; budget {doc.get('budget_s')} s, elapsed {doc.get('elapsed_s')} s; "
        f"{state}.",
    ]
    lines += _machine(doc) + [
        "- Compare with the measured database and the TLT paper: "
        "`tlt gpu-check --measured <this run's .json>`.",
        "",
    ]
    sections = doc.get("sections", {})
    lines += _sections(doc)
    for s in sections.values():
        if s.get("kind") == "correctness":
            lines += _correctness(s)
    for s in sections.values():
        if s.get("kind") == "attention" and s.get("shapes"):
            lines += _attention(s)
    lines += (_throughput(sections) + _engine(sections) + _sweep(sections)
              + moe_summary.markdown(sections))
    return "\n".join(lines).rstrip() + "\n"


def _sweep(sections: dict) -> list[str]:
    """The engine sweep's summary (its directory holds the traces `tlt calibrate` fits)."""
    out = []
    for name, s in sections.items():
        if s.get("kind") != "sweep" or not s.get("rows"):
            continue
        i = s.get("identity") or {}
        out += [f"## {name}: {i.get('framework')} {i.get('version')} on {i.get('device')}, "
                f"{i.get('method')}, {'CUDA graphs' if i.get('graphs') else 'eager'} "
                f"(`tlt calibrate {s.get('sweep_dir')} --out P.yaml`)", ""]
        out += table(["context", "batch", "K", "plain ms", "SD ms", "tokens/pass", "speedup"],
                     [[r["context"], r["batch"], r["k"], _f(r["plain_ms"]), _f(r["sd_ms"]),
                       _f(r["tokens_per_pass"]), _f(r["speedup"])] for r in s["rows"]])
    return out


def headline(doc: dict) -> list[str]:
    """The run's key figures in a few lines, printed last (a remote run's output tail has them)."""
    out = []
    for name, s in doc.get("sections", {}).items():
        if s.get("kind") == "correctness" and "grpo" in s:
            g, d = s["grpo"], s["drafter"]
            out.append(
                f"{name}: GRPO passed {g['passed']} (update cosine {g['update_cosine']:.4f}), "
                f"drafter passed "
                f"{d['passed']} (cosine {d['update_cosine']:.4f}), packed drafter step = padded "
                f"{d['packed_vs_padded']['passed']}"
            )
        elif s.get("kind") == "grpo" and s.get("speedup"):
            out.append(
                f"{name}: packed {s['packed_tokens_per_s']} tokens/s, "
                f"padded {s['padded_tokens_per_s']}, "
                f"{s['speedup']}x" + _others(s)
            )
        elif s.get("kind") == "drafter" and s.get("speedup"):
            out.append(
                f"{name}: plain {s['plain_samples_per_s']} samples/s, "
                f"packed {s['packed_samples_per_s']}, "
                f"{s['speedup']}x (the paper: 13.3 and 29.6)" + _others(s)
            )
        elif s.get("kind") == "attention":
            out += [
                f"{name}: {sh['label']}: "
                + ", ".join(
                    f"{b} {v.get('fresh_ms')} ms fresh / {v.get('same_ms')} same"
                    if v.get("status") == "ok"
                    else f"{b} {v.get('status', '?')[:160]}"
                    for b, v in (sh.get("backends") or {}).items()
                )
                for sh in s.get("shapes", [])
            ]
        elif s.get("kind") == "moe":
            out += moe_summary.headline(name, s)
        elif s.get("kind") == "engine":
            ok = sum(r.get("status") == "ok" for r in s.get("runs", []))
            rows = sum(len(r.get("rows") or []) for r in s.get("runs", []))
            out.append(f"{name}: {ok}/{len(s.get('runs', []))} runs ok, {rows} points")
    return out


def _others(s: dict) -> str:
    """The packed paths besides "packed": their ratios, and the attention each ran."""
    base = "padded" if s.get("kind") == "grpo" else "plain"
    ratios, used = s.get(f"ratio_to_{base}") or {}, s.get("attention_by_path") or {}
    parts = [f"{p} {r}x" for p, r in ratios.items() if p != "packed"]
    if used:
        parts.append("attention " + ", ".join(f"{p}: {b}" for p, b in used.items()))
    return f"; {'; '.join(parts)}" if parts else ""
