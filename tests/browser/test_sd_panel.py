"""What-if's panel on where SD stops paying (issue 48 item 5, issue 50): one crossover, the engine
mechanism that ends SD's gain there, a threshold that agrees with it, and a per-bucket table that
never runs SD above it, for batches 1 to 512."""

from __future__ import annotations

import re

PANEL = "Where SD stops paying on this cluster"


def _panel(pg):
    return pg.locator("[data-testid=stExpander]").filter(has=pg.get_by_text(PANEL)).first


def _buckets(panel) -> list[tuple[int, int, str]]:
    """The bucket table's rows: (first batch, last batch, strategy)."""
    rows = []
    for row in panel.locator("table tbody tr").all():
        cells = [c.strip() for c in row.locator("th, td").all_inner_texts()]
        lo, hi = (int(v) for v in cells[0].split("-"))
        rows.append((lo, hi, cells[1]))
    return rows


def test_one_crossover_one_threshold_and_no_sd_above_it(page, open_page, appear, healthy, rerun,
                                                        shot):
    open_page(page, "what-if", "Why this speedup")
    page.get_by_text(PANEL).first.click()
    panel = _panel(page)
    # At 512 tokens of context the page's default cluster (Qwen2.5-32B on 8 H100s) stops paying.
    context = panel.locator("[data-testid=stNumberInput]").filter(
        has=page.get_by_text("Context", exact=True)).locator("input")
    with rerun(page):
        context.fill("512")
        context.press("Enter")
    answer = panel.get_by_text(re.compile(r"SD stops paying from batch \d+, because of"))
    appear(page, answer)
    healthy(page)
    text = answer.inner_text()
    crossover = int(re.search(r"SD stops paying from batch (\d+)", text).group(1))
    threshold = int(re.search(r"turn SD off above batch (\d+)", text).group(1))
    assert threshold == crossover - 1, text
    # why: one of the engine's mechanisms, said in words
    assert re.search(r"verify pass|host's work|eager|drafting", text), text
    rows = _buckets(panel)
    assert rows and rows[-1][1] == 512  # the table covers batch 1-512
    assert all(s == "off" for lo, _, s in rows if lo > threshold), rows
    assert any(s != "off" and hi == threshold for _, hi, s in rows), rows  # SD runs up to it
    # the chart spans the same batches and draws the policy's curve beside the strategy's
    plot = panel.locator(".js-plotly-plot").first
    plot.wait_for()
    lo, hi = plot.evaluate("e => e._fullLayout.xaxis.range")
    assert 10 ** lo < 1.1 and 500 < 10 ** hi < 520, (lo, hi)
    names = plot.evaluate("e => e.data.map(t => t.name)")
    assert any("best draft length per batch" in n for n in names), names
    # the engine release the answer prices is named
    assert panel.get_by_text(re.compile(r"Priced for sglang \d")).count() >= 1
    shot(page, "sd-panel", show=PANEL)
