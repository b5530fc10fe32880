"""The app as a user meets it: every page at its own URL, and each page's main action with small
inputs, in headless Chromium (fixtures: tests/browser/conftest.py)."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

# Every page: its URL path and the title it shows. The navigation's own links are checked
# against this list, so a page added to app.py without a browser test fails here.
PAGES = {
    "what-if": "What-if",
    "compare": "Compare",
    "tune": "Tune",
    "plan": "Plan",
    "calibrate": "Calibrate",
    "train": "Train (real)",
    "paper": "The TLT paper, reproduced",
}
# one real RL step: Ray, one vLLM engine on CPU, the GRPO update (about 1.5 min on 2 busy cores)
TRAIN_S = 420


def test_every_page_opens_at_its_own_url(page, open_page, healthy, shot):
    open_page(page, "", "What-if")
    assert page.url.rstrip("/").endswith("/what-if")  # the root forwards to the What-if page
    links = page.eval_on_selector_all("[data-testid=stSidebarNav] a", "els => els.map(e => e.href)")
    paths = [link.rstrip("/").rsplit("/", 1)[-1] for link in links]
    assert sorted(paths) == sorted(PAGES), (f"pages in the navigation: {paths}; give new ones a "
                                            "test here")
    for path, title in PAGES.items():
        open_page(page, path, title)
        page.get_by_role("heading", name=title).first.wait_for()
        assert page.url.rstrip("/").endswith(f"/{path}")
        healthy(page)
        shot(page, f"page-{path}")


def test_whatif_shows_results_on_arrival_then_simulates(page, open_page, appear, healthy, shot,
                                                        widgets, tmp_path):
    open_page(page, "what-if", "Speedup: tlt")  # the default comparison, without pressing anything
    healthy(page)
    tiles = page.locator("[data-testid=stMetric]").all_inner_texts()
    assert any(t.startswith("Tail: tlt") and "%" in t for t in tiles), tiles
    assert any(t.startswith("Bubble: tlt") for t in tiles), tiles
    shot(page, "whatif-arrival")

    widgets.select(page, "Workload preset", "cpu-tiny")
    widgets.number(page, "Steps", 1)
    widgets.click(page, "Run simulation")
    appear(page, page.get_by_text(re.compile(r"Workload cpu-tiny · profile .* · 1 step\(s\)")))
    healthy(page)
    assert page.get_by_text("The inputs changed since this run").count() == 0
    shot(page, "whatif-cpu-tiny", show="Results")

    report = widgets.download(page, "Download report (HTML)", tmp_path / "whatif.html").read_text()
    assert "What-if: cpu-tiny" in report and "Plotly.newPlot" in report
    assert "<script src=" not in report
    svg = widgets.download(page, "SVG", tmp_path / "steps.svg").read_text()
    assert svg.lstrip().startswith("<svg")


def test_compare_runs_policies_over_seeds(page, open_page, appear, healthy, shot, widgets,
                                          tmp_path):
    open_page(page, "compare", "Run comparison")
    widgets.select(page, "Workload preset", "cpu-tiny")
    widgets.number(page, "Seeds", 1)
    widgets.number(page, "Steps", 1)
    widgets.click(page, "Run comparison")
    appear(page, page.get_by_role("button", name="Download compare.json"))
    healthy(page)
    assert page.get_by_text("Workload cpu-tiny").count() >= 1
    shot(page, "compare", show="Results")
    report = widgets.download(page, "Download report (HTML)", tmp_path / "compare.html").read_text()
    assert "Compare: cpu-tiny" in report and "<svg" in report and "Tail" in report
    png = widgets.download(page, "PNG", tmp_path / "compare.png").read_bytes()
    assert png.startswith(b"\x89PNG")


def test_tune_runs_a_few_trials(page, open_page, appear, healthy, shot, widgets):
    open_page(page, "tune", "Run study")
    widgets.select(page, "Workload preset", "cpu-tiny")
    widgets.number(page, "Trials", 3)
    widgets.number(page, "Seeds", 1)
    widgets.number(page, "Steps per simulation", 1)
    widgets.text(page, "Storage", "memory")  # nothing written into the checkout
    widgets.click(page, "Run study")
    appear(page, page.get_by_text("Tuned step time"))
    healthy(page)
    assert page.get_by_text(re.compile(r"3 complete trials")).count() == 1
    page.get_by_role("button", name="Download policy (YAML)").wait_for()
    shot(page, "tune", show="Convergence")


def test_paper_reproduction_runs(page, open_page, appear, healthy, shot, widgets):
    open_page(page, "paper", "Microbenchmark fit")
    widgets.number(page, "Steps per case", 1)
    widgets.click(page, "Run the reproduction")
    appear(page, page.get_by_text("Table A prediction, pre-registered"))
    healthy(page)
    page.get_by_text("Where Table A's time goes").wait_for()
    shot(page, "paper")


def test_calibrate_shows_the_shipped_calibration_and_checks_the_form(
        page, open_page, appear, healthy, shot, widgets, tmp_path):
    """The shipped self-calibration's report on arrival; a model directory that is not one is named
    and nothing can start. (A real calibration takes minutes: `tlt calibrate --model` is tested on
    the CLI.)"""
    open_page(page, "calibrate", "Calibration report")
    appear(page, page.get_by_text("Held-out captures, worst |error|"))
    healthy(page)
    tiles = page.locator("[data-testid=stMetric]").all_inner_texts()
    assert any(t.startswith("Held-out captures, worst |error|") for t in tiles), tiles
    shot(page, "calibrate", show="Held-out captures")
    widgets.text(page, "Model directory", str(tmp_path / "no-model"))
    appear(page, page.get_by_text(re.compile(r"Model directory '.*no-model' has no config.json")))
    assert page.get_by_role("button", name="Calibrate this machine").is_disabled()
    healthy(page, errors_ok=True)


@pytest.mark.needs_vllm
@pytest.mark.needs_reference
def test_train_runs_one_real_step(page, open_page, appear, healthy, shot, widgets, tmp_path):
    run_dir = tmp_path / "run"
    open_page(page, "train", "Run directory to watch")
    healthy(page)
    widgets.number(page, "Steps", 1)
    widgets.number(page, "Workers", 1)
    widgets.number(page, "Prompts per step", 2)
    widgets.number(page, "Samples per prompt", 2)
    widgets.number(page, "Max tokens", 32)
    widgets.text(page, "Run directory", str(run_dir))
    healthy(page)
    widgets.click(page, "Start")
    status = page.get_by_text(re.compile(r"^running \(pid (\d+)\)")).first
    status.wait_for()
    pid = int(re.search(r"pid (\d+)", status.inner_text()).group(1))
    shot(page, "train-running")
    try:
        # Nothing is clicked from here on: the page redraws the run's status by itself.
        ended = page.get_by_text(re.compile(r"^(finished|failed|stopped) \(pid")).first
        ended.wait_for(timeout=TRAIN_S * 1000)
    finally:
        _stop(pid)
    finished = page.get_by_text(re.compile(r"^finished \(pid"))
    assert finished.count() == 1, page.locator("[data-testid=stAlertContainer]").all_inner_texts()
    appear(page, page.get_by_text("Where the rollout's worker-time went"))
    healthy(page)
    tiles = page.locator("[data-testid=stMetric]").all_inner_texts()
    assert any(t.startswith("Steps done") and t.rstrip().endswith("1") for t in tiles), tiles
    assert any(t.startswith("Tail (last step)") for t in tiles), tiles
    assert (run_dir / "metrics.csv").is_file()
    assert (run_dir / "trace" / "timeline.parquet").is_file()
    shot(page, "train-finished", show="Where the rollout's worker-time went")
    # The simulator's prediction of the finished run, beside what it measured.
    widgets.click(page, "Predict this run")
    appear(page, page.get_by_text(re.compile(r"mean step predicted .* measured")))
    healthy(page)
    # The finished run no longer holds the page: its directory is taken (Resume continues it),
    # another starts.
    page.get_by_text("holds the run started here").wait_for()
    assert page.get_by_role("button", name="Start").is_disabled()
    widgets.text(page, "Run directory", str(tmp_path / "next"))
    assert page.get_by_role("button", name="Start").is_enabled()
    healthy(page)


def _stop(pid: int) -> None:
    """End a run the test started, if it is still going (its own process group: Ray and vLLM
    too)."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(40):
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    os.killpg(pid, signal.SIGKILL)


def test_a_broken_page_fails_the_check(page, open_page, healthy):
    """The checks can fail: an unknown URL shows Streamlit's 'Page not found', which healthy()
    refuses. Waited for first, not after the main page settles: a later rerun of the main page may
    close the dialog."""
    open_page(page, "no-such-page", "Page not found")
    with pytest.raises(AssertionError, match="Page not found"):
        healthy(page)
