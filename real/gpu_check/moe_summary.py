"""The MoE section in the check's Markdown summary and headline (real/gpu_check/moe.py): per
model shape and token count, the layer's time, the experts its routing touched, the weights those
hold, and the time they take to read at the bandwidth measured in the same run. No torch here."""

from __future__ import annotations

from real.gpu_check.plan import MOE_SD_BATCHES, MOE_SD_DRAFTS


def bytes_read_ms(shape: dict, touched: float) -> float | None:
    """Milliseconds to read the touched experts' weights (and the router and shared expert) once
    at the run's measured bandwidth: the layer's floor if it is bound by reading weights."""
    bw = shape.get("bandwidth_gbs")
    if not bw:
        return None
    mib = touched * shape["expert_mib"] + shape["fixed_mib"]
    return mib * 2**20 / (bw * 1e9) * 1e3


def verify_over_decode(shape: dict) -> list[tuple[int, int, float]]:
    """(batch, drafts, time of a verify pass of batch x (drafts + 1) tokens over a decode step of
    batch tokens), where both token counts were timed."""
    ms = {p["tokens"]: p["ms"] for p in shape.get("points", [])}
    return [
        (b, k, ms[b * (k + 1)] / ms[b])
        for b in MOE_SD_BATCHES
        for k in MOE_SD_DRAFTS
        if b in ms and b * (k + 1) in ms and ms[b] > 0
    ]


def markdown(sections: dict) -> list[str]:
    shapes = [sh for s in sections.values() if s.get("kind") == "moe" for sh in s.get("moe", [])]
    if not shapes:
        return []
    lines = [
        "## One MoE layer by tokens routed (random weights; fused top-k routing, grouped GEMMs)",
        "",
        f"Read bandwidth measured in this run: {shapes[0].get('bandwidth_gbs')} GB/s. 'read ms': "
        "the touched experts' weights (plus router and shared expert) read once at it.",
        "",
    ]
    for sh in shapes:
        lines += [
            f"### {sh['label']}: {sh['experts']} experts, top-{sh['top_k']}, hidden "
            f"{sh['hidden']}, expert FFN {sh['moe_intermediate']}"
            + (f", shared {sh['shared_intermediate']}" if sh.get("shared_intermediate") else "")
            + f" ({sh['expert_mib']:.1f} MiB per expert, {sh['dtype']})",
            "",
            "| tokens | ms | experts touched | read ms | ms / read ms | mode |",
            "|---|---|---|---|---|---|",
        ]
        for p in sh["points"]:
            read = bytes_read_ms(sh, p["experts_touched"])
            ratio = f"{p['ms'] / read:.2f}" if read else "-"
            lines.append(
                f"| {p['tokens']} | {p['ms']:.4g} | {p['experts_touched']:g} | "
                f"{read:.4g} | {ratio} | {p['mode'][:40]} |" if read else
                f"| {p['tokens']} | {p['ms']:.4g} | {p['experts_touched']:g} | - | - | "
                f"{p['mode'][:40]} |"
            )
        pairs = verify_over_decode(sh)
        if pairs:
            lines += ["", "Verify pass over decode step (same batch): " + ", ".join(
                f"B{b} K{k} {r:.2f}x" for b, k, r in pairs
            ) + "."]
        lines.append("")
    return lines


def headline(name: str, s: dict) -> list[str]:
    out = []
    for sh in s.get("moe", []):
        pairs = ", ".join(f"B{b}/K{k} {r:.2f}x" for b, k, r in verify_over_decode(sh) if k == 3)
        out.append(f"{name}: {sh['label']}: verify/decode {pairs or '-'}")
    return out
