"""What only a browser shows of the pages' second hour (fixtures: tests/browser/conftest.py): each
figure's interval read where the user reads it, nothing cut off on the right, no two axis labels
on top of each other. Each test waits for the state or the data the user waits for, never for a
fixed time."""

from __future__ import annotations

import re

from playwright.sync_api import expect

# the bounding boxes of a chart's category labels (plotly draws them as SVG text), one row each
_TICK_BOXES = """chart => [...chart.querySelectorAll('g.xtick text, g.xtick2 text')]
    .map(t => t.getBoundingClientRect())
    .filter(r => r.width > 0)
    .map(r => [r.left, r.right, Math.round(r.top)])"""


def test_whatif_reads_each_figure_with_its_interval_and_wraps_how_sure(page, open_page, healthy,
                                                                       shot):
    open_page(page, "what-if", "Speedup: tlt")
    tile = page.locator("[data-testid=stMetric]").filter(has_text="Speedup: tlt")
    expect(tile).to_contain_text(re.compile(r"90%: \d\.\d\d-\d\.\d\dx"))
    sure = page.locator("[data-testid=stCode]").filter(has_text="90%:").first
    expect(sure).to_be_visible()
    # every line of How sure is on screen: wrapped, not scrolled off the right edge
    overflow = sure.locator("pre").evaluate("el => el.scrollWidth - el.clientWidth")
    assert overflow <= 1, f"How sure is {overflow} px wider than its box"
    totals = page.locator("[data-testid=stDataFrame]").filter(has_text="Days, 90%")
    expect(totals).to_be_visible()
    healthy(page)
    shot(page, "whatif-how-sure", show="How sure:")


def test_calibrate_bucket_labels_do_not_overlap(page, open_page, healthy, shot):
    open_page(page, "calibrate", "Calibration report")
    chart = page.locator("[data-testid=stPlotlyChart]").filter(
        has=page.locator("text=Step latency by batch bucket"))
    chart.scroll_into_view_if_needed()
    # the labels are drawn once plotly has laid the chart out
    page.wait_for_function(f"""() => {{
        const c = [...document.querySelectorAll('[data-testid=stPlotlyChart]')]
            .find(e => e.textContent.includes('Step latency by batch bucket'));
        return c && ({_TICK_BOXES})(c).length >= 8;
    }}""")
    boxes = chart.evaluate(_TICK_BOXES)
    rows: dict[int, list] = {}
    for left, right, top in boxes:
        rows.setdefault(top, []).append((left, right))
    for top, spans in rows.items():
        spans.sort()
        touching = [(a, b) for a, b in zip(spans, spans[1:]) if b[0] < a[1]]
        assert not touching, f"labels overlap in the row at y={top}: {touching}"
    healthy(page)
    shot(page, "calibrate-buckets", show="Step latency by batch bucket")
