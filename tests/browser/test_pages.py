"""The app as a user meets it: every page at its own URL, and each page's main action with small
inputs, in headless Chromium (fixtures: tests/browser/conftest.py)."""

from __future__ import annotations

import os
import re
import signal

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
# two real RL steps: Ray, one vLLM engine on CPU, the GRPO updates (about 2 min on 2 busy cores)
TRAIN_S = 480
REAP_S = 10  # the app reaps a finished run when it next looks (every page refresh)


def test_every_page_opens_at_its_own_url(page, open_page, healthy, shot):
    open_page(page, "", "What-if")
    page.wait_for_url("**/what-if")  # the root forwards to the What-if page
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
    assert page.get_by_text(re.compile(r"3 complete trials, 3 of them run now")).count() == 1
    page.get_by_role("button", name="Download policy (YAML)").wait_for()
    shot(page, "tune", show="Convergence")


def test_tune_a_second_target_on_the_default_name(page, open_page, appear, healthy, shot,
                                                  widgets, tmp_path):
    """SGLang, then vLLM, on the default study name in a file that keeps both: no refusal; the
    same study run again says it runs nothing, before and after Run."""
    open_page(page, "tune", "Run study")
    widgets.number(page, "Trials", 2)
    widgets.number(page, "Seeds", 1)
    widgets.number(page, "Steps per simulation", 1)
    widgets.text(page, "Storage", f"sqlite:///{tmp_path / 'studies.db'}")
    appear(page, page.get_by_text("A new study: Run study runs 2 trials."))
    widgets.click(page, "Run study")
    appear(page, page.get_by_text("Tuned step time"))
    healthy(page)
    appear(page, page.get_by_text(re.compile(r"holds 2 finished trials .*Run study runs none")))
    widgets.click(page, "Run study")
    appear(page, page.get_by_text(re.compile("No trial ran now")))
    widgets.radio(page, "vLLM")
    appear(page, page.get_by_text("A new study: Run study runs 2 trials."))
    assert page.get_by_role("heading", name="Results").count() == 0  # SGLang's, not shown here
    widgets.click(page, "Run study")
    appear(page, page.get_by_text("Tuned step time"))
    healthy(page)
    assert page.get_by_text(re.compile(r"Study \S+-vllm in")).count() == 1
    shot(page, "tune-second-target", show="Results")


def test_paper_reproduction_runs(page, open_page, appear, healthy, shot, widgets, grid_cells):
    open_page(page, "paper", "Microbenchmark fit")
    widgets.number(page, "Steps per case", 1)
    widgets.click(page, "Run the reproduction")
    appear(page, page.get_by_text("Table A prediction, pre-registered"))
    healthy(page)
    page.get_by_text("Where Table A's time goes").wait_for()
    # Only what the run computed: no headline reads "-", no column of None.
    values = page.locator("[data-testid=stMetricValue]").all_inner_texts()
    assert values and all(v.strip().endswith("%") for v in values), values
    headers = grid_cells(page.locator("[data-testid=stDataFrame]").first,
                         ("pre-registered", "unit"))
    assert not {"measured parts", "calibrated (LOO)", "measured gap %"} & set(headers), headers
    cells = grid_cells(page.locator("[data-testid=stDataFrame]").nth(1),
                       ("baseline step", "rollout share", "TLT rollout speedup"))
    assert "None" not in cells and "nan" not in cells
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
def test_train_runs_real_steps(page, open_page, appear, healthy, shot, widgets, tmp_path, docs_shot,
                               grid_cells, poll_until, new_tab):
    """A real run started in one tab, watched from another, ended with no page looking: reaped
    (no zombie), and every tab opened later greets it with how it ended, not a refusal."""
    run_dir = tmp_path / "run"
    open_page(page, "train", "Run directory to watch")
    healthy(page)
    widgets.number(page, "Steps", 2)
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
        # Another tab opened mid-run sees it, with its Stop, and no refusal.
        tab = new_tab("train")
        tab.get_by_text(re.compile(rf"^running \(pid {pid}\)")).first.wait_for()
        # the page draws its elements one after another: the Stop button may follow the line
        tab.get_by_role("button", name="Stop").first.wait_for()
        assert tab.get_by_role("button", name="Stop").count() == 1
        assert tab.locator("[data-testid=stAlertContentError]").count() == 0
        # The tab that started it goes elsewhere: no page of that session looks at the run.
        open_page(page, "what-if", "Why this speedup")
        assert _ends_reaped(pid, TRAIN_S, poll_until), f"pid {pid} was left a zombie"
    finally:
        _stop(pid, poll_until)
    # The other tab redraws the run's status by itself.
    ended = tab.get_by_text(re.compile(r"^(finished|failed|stopped) \(pid")).first
    ended.wait_for()
    finished = tab.get_by_text(re.compile(r"^finished \(pid"))
    assert finished.count() == 1, tab.locator("[data-testid=stAlertContainer]").all_inner_texts()
    appear(tab, tab.get_by_text("Where the rollout's worker-time went"))
    healthy(tab)
    tiles = tab.locator("[data-testid=stMetric]").all_inner_texts()
    assert any(t.startswith("Steps done") and t.rstrip().endswith("2") for t in tiles), tiles
    assert any(t.startswith("Tail (last step)") for t in tiles), tiles
    assert (run_dir / "metrics.csv").is_file()
    assert (run_dir / "trace" / "timeline.parquet").is_file()
    # The metrics in words, and no cell reads None; the log never prints a NaN as a measurement.
    cells = grid_cells(tab.locator("[data-testid=stDataFrame]").first,
                       ("Step", "Step (s)", "Accepted length", "Drafter"))
    assert "step_s" not in cells and "None" not in cells and "nan" not in cells
    assert "measured nan" not in (run_dir / "train.log").read_text()
    # The simulator's prediction of the finished run, beside what it measured.
    widgets.click(tab, "Predict this run")
    appear(tab, tab.get_by_text(re.compile(r"mean step predicted .* measured")))
    healthy(tab)
    # The finished run's directory is taken (Resume continues it); another starts.
    widgets.text(tab, "Run directory", str(run_dir))
    tab.get_by_text("holds the run started here").wait_for()
    assert tab.get_by_role("button", name="Start").is_disabled()
    widgets.text(tab, "Run directory", str(tmp_path / "next"))
    assert tab.get_by_role("button", name="Start").is_enabled()
    healthy(tab)
    tab.context.close()
    # A tab opened after it ended: how it ended, its monitor, no red box and Start enabled.
    later = new_tab("train")
    later.get_by_text(re.compile(rf"^finished \(pid {pid}\)")).first.wait_for()
    appear(later, later.get_by_text("Where the rollout's worker-time went"))
    healthy(later)
    assert later.get_by_role("button", name="Start").is_enabled()
    shot(later, "train-finished", show="Monitor")
    docs_shot(later, "train-finished.png", height=2400)
    later.context.close()


def _state(pid: int) -> str | None:
    """Process `pid`'s state letter (Z: a zombie), or None once it is gone (reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _ends_reaped(pid: int, within_s: float, poll_until) -> bool:
    """Whether process `pid` ends within `within_s` and is reaped (not left a zombie of the app:
    a zombie that the app's reaper does not collect within REAP_S fails)."""
    if not poll_until(lambda: _state(pid) in (None, "Z"), within_s):
        return False
    return poll_until(lambda: _state(pid) is None, REAP_S)


def _stop(pid: int, poll_until) -> None:
    """End a run the test started, if it is still going (its own process group: Ray and vLLM
    too)."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return

    def gone() -> bool:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        return False

    if not poll_until(gone, 20):
        os.killpg(pid, signal.SIGKILL)


def test_a_broken_page_fails_the_check(page, open_page, healthy):
    """The checks can fail: an unknown URL shows Streamlit's 'Page not found', which healthy()
    refuses. Waited for first, not after the main page settles: a later rerun of the main page may
    close the dialog."""
    open_page(page, "no-such-page", "Page not found")
    with pytest.raises(AssertionError, match="Page not found"):
        healthy(page)
