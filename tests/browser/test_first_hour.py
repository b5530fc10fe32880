"""The first hour as a new user meets it, in headless Chromium (fixtures:
tests/browser/conftest.py): the default What-if explains its speedups, your own lengths wait for
your cluster, a policy tuned for vLLM exports without refusal, no cell reads "None", and the app
fetches nothing from the web.

With TLT_DOCS_SHOTS=DIR the screenshots the README shows are written there too
(`TLT_DOCS_SHOTS=docs python -m pytest tests/browser/test_first_hour.py`)."""

from __future__ import annotations

import re
from urllib.parse import urlparse

LOCAL = {"127.0.0.1", "localhost"}


def _outside(requests: list[str]) -> list[str]:
    """Requests to anywhere but this app (data: and blob: URLs are the page's own)."""
    return [
        u
        for u in requests
        if urlparse(u).scheme in ("http", "https", "ws", "wss")
        and urlparse(u).hostname not in LOCAL
    ]


def _no_none_cells(pg, grid_cells) -> None:
    """No table cell and no metric reads "None" (a missing figure is '-' with a hint). The grids
    draw on a canvas; their cells are also in an accessible table, which is what this reads."""
    grids = pg.locator("[data-testid=stDataFrame]")
    grids.first.wait_for()
    cells = []
    for i in range(grids.count()):
        cells += grid_cells(grids.nth(i))
    assert "baseline" in cells, cells[:40]  # the cells are read, not a blank canvas
    assert "None" not in cells and "nan" not in cells, [c for c in cells if c in ("None", "nan")]
    for t in pg.locator("[data-testid=stMetricValue]").all_inner_texts():
        assert t.strip() not in ("None", "nan")


def test_the_default_whatif_explains_each_speedup(page, open_page, appear, healthy, shot,
                                                  docs_shot, grid_cells):
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    open_page(page, "what-if", "Why this speedup")
    healthy(page)
    appear(
        page,
        page.get_by_text(
            re.compile(r"tlt \d+\.\d\dx vs baseline: \d+% of baseline's decoding runs")
        ),
    )
    assert (
        page.get_by_text("polytrace-dapo-qwen2.5-32b").count() >= 1
    )  # measured lengths, not a hand-set shape
    assert page.get_by_text(re.compile(r"seed 0")).count() >= 1
    _no_none_cells(page, grid_cells)
    shot(page, "whatif-default", show="Why this speedup")
    docs_shot(page, "whatif-default.png")
    assert not _outside(requests), _outside(requests)
    icon = page.eval_on_selector("link[rel~='icon']", "e => e.href")
    assert urlparse(icon).hostname in LOCAL or icon.startswith("data:"), icon


def _panel(pg):
    """The expander of SD's speedup by batch."""
    return pg.locator("[data-testid=stExpander]").filter(
        has=pg.get_by_text("Where SD stops paying on this cluster")).first


def test_where_sd_stops_paying_reads_at_a_glance(page, open_page, appear, healthy, shot,
                                                 docs_shot, laid_out):
    """The panel under the cluster: its batch axis spans the batches it plots (it ran to 10^92),
    its inputs' labels fit on one line (a side column broke them: "Stra tegy"), and the Tokens per
    pass box shows the figure the sentence uses (it showed 0.00 beside 5.67)."""
    open_page(page, "what-if", "Why this speedup")
    page.get_by_text("Where SD stops paying on this cluster").first.click()
    panel = _panel(page)
    sentence = panel.get_by_text(re.compile(r"tokens per pass\) stops paying"))
    appear(page, sentence)
    panel.locator(".js-plotly-plot").first.wait_for()
    laid_out(page)
    healthy(page)
    lo, hi = panel.locator(".js-plotly-plot").first.evaluate(
        "e => e._fullLayout.xaxis.range")
    assert 10 ** lo >= 0.9 and 10 ** hi <= 600, (lo, hi)  # batches 1..512
    used = re.search(r"\((\d+\.\d\d) tokens per pass\)", sentence.inner_text()).group(1)
    accept = panel.locator("[data-testid=stNumberInput]").filter(
        has=page.get_by_text("Tokens per pass", exact=True)).locator("input")
    assert accept.input_value() == "" and accept.get_attribute("placeholder").startswith(used)
    for label in ("Drafter", "Strategy", "Tokens per pass", "Context"):
        box = panel.get_by_text(label, exact=True).first.bounding_box()
        assert box["height"] < 30, (label, box)  # one line of text
    shot(page, "whatif-sd-panel", show="Where SD stops paying on this cluster")
    docs_shot(page, "whatif-sd-panel.png", show="Cluster", height=1300)


def _no_results(pg) -> None:
    """No Results section: no result of another input under this one."""
    assert pg.get_by_role("heading", name="Results").count() == 0
    tiles = pg.locator("[data-testid=stMetric]").all_inner_texts()
    assert not [t for t in tiles if t.startswith("Speedup:")], tiles


def test_a_length_file_asks_for_its_cluster_before_it_simulates(
    page, open_page, appear, healthy, widgets, tmp_path
):
    lengths = tmp_path / "mine.csv"
    rows = [
        f"{s},q{p},{80 + 53 * (p * 7 + m * 3 + s) % 2000}"
        for s in range(2)
        for p in range(16)
        for m in range(4)
    ]
    lengths.write_text("step,prompt,length\n" + "\n".join(rows) + "\n")
    open_page(page, "what-if", "Why this speedup")
    widgets.radio(page, "Length file")
    page.locator("[data-testid=stFileUploader] input[type=file]").first.set_input_files(
        str(lengths)
    )
    appear(page, page.get_by_text("Choose the model, GPU, TP and framework your lengths ran on"))
    healthy(page)
    assert page.get_by_text("What the files hold").count() == 1
    assert page.get_by_role("button", name="Run simulation").is_disabled()
    _no_results(page)  # the preset's 1.8x is not the upload's
    assert (
        page.get_by_text("tlt-eval-qwen2.5-32b").count() == 0
    )  # no hardware from an unrelated preset
    for label, option in (
        ("Model", "qwen2.5-7b"),
        ("GPU", "h100"),
        ("TP", "1"),
        ("Framework", "vllm"),
    ):
        widgets.select(page, label, option, filter_text=True)
    appear(page, page.get_by_role("button", name="Run simulation"))
    healthy(page)
    assert page.get_by_role("button", name="Run simulation").is_enabled()


def test_a_policy_tuned_for_vllm_exports_without_refusal(
    page, open_page, appear, healthy, shot, widgets, tmp_path, docs_shot, grid_cells
):
    open_page(page, "tune", "Run study")
    widgets.number(page, "Trials", 4)
    widgets.number(page, "Seeds", 1)
    widgets.number(page, "Steps per simulation", 1)
    widgets.text(page, "Storage", "memory")  # nothing written into the checkout
    widgets.radio(page, "vLLM")
    widgets.click(page, "Run study")
    appear(page, page.get_by_text("Tuned step time"))
    healthy(page)
    assert page.get_by_text(re.compile(r"vLLM: not exported")).count() == 0
    exported = widgets.download(page, "Download for vLLM", tmp_path / "tuned.vllm.yaml").read_text()
    # the study's default name says its target, which is not the workload's own engine
    assert exported.startswith(
        "# tlt export: policy 'tuned-tune-polytrace-dapo-qwen2.5-32b-vllm' for vLLM."
    )
    # the notes may say what was checked of the drafter, never that a field was approximated or
    # dropped
    notes = [ln for ln in exported.splitlines() if ln.startswith("#   - ")]
    assert not [n for n in notes if n[6:].startswith(("approximated", "dropped"))], notes
    _no_none_cells(page, grid_cells)
    shot(page, "tune-exported", show="Export tuned-tune-polytrace-dapo-qwen2.5-32b-vllm")
    docs_shot(page, "tune-exported.png")


def test_a_rejected_file_shows_no_old_result(page, open_page, appear, healthy, widgets, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("step,prompt\n0,a\n")
    open_page(page, "what-if", "Why this speedup")
    widgets.radio(page, "Length file")
    _no_results(page)  # nothing uploaded yet
    page.locator("[data-testid=stFileUploader] input[type=file]").first.set_input_files(str(bad))
    appear(page, page.get_by_text(re.compile("Length file rejected")))
    healthy(page, errors_ok=True)
    assert page.get_by_role("button", name="Run simulation").is_disabled()
    _no_results(page)
