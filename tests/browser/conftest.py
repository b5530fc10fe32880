"""End-to-end tests of the Streamlit app in a real browser: Playwright (Python) driving Debian's
Chromium against `streamlit run app.py` on a free localhost port.

One Streamlit server and one browser serve the whole session; each test opens its page in a
fresh browser context (a new Streamlit session), so tests do not share widget state. Each test
saves a screenshot under its temporary directory (`tmp_path`).

Where Chromium (/usr/bin/chromium, or $TLT_CHROMIUM) or the `playwright` package is missing,
these tests skip with the reason; under CI (`CI` set, as `.ci/run` runs) or with
TLT_REQUIRE_BROWSER=1 they fail instead, so a broken install cannot pass silently. `make test`
installs both (the Makefile's chromium step, the `test` extra). Run only these tests with
`make test-browser` or `.venv/bin/python -m pytest tests/browser`.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("TLT_CHROMIUM", "/usr/bin/chromium"))
# As this project's machines need them: no sandbox as root, and no background traffic to Google's
# hosts (the network is closed; Chromium would retry many connections at every start).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
# a cold start imports streamlit, pandas, plotly, torch's and vLLM's Python parts
SERVER_START_S = 180
PAGE_S = 120  # the longest a page may take to show what a test waits for (2 busy cores)


def _required() -> bool:
    return bool(os.environ.get("CI")) or os.environ.get("TLT_REQUIRE_BROWSER") == "1"


def _missing() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install -e '.[test]')"
    if not CHROMIUM.is_file():
        return (f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium; `make test` "
                "installs it)")
    return None


@pytest.fixture(scope="session")
def browser():
    missing = _missing()
    if missing:
        if _required():
            pytest.fail(f"browser tests must run under CI, but {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # launch() gives every run a fresh, temporary profile (the --user-data-dir the machines
        # need).
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def app_tmp(tmp_path_factory) -> Path:
    """The app's system temporary folder (TMPDIR), its own, so that what it leaves there can be
    counted."""
    return tmp_path_factory.mktemp("app-tmp")


def left_behind(tmp: Path) -> list[str]:
    """What the app left in its temporary folder (its tlt-* directories and files)."""
    return sorted(p.name for p in tmp.glob("tlt-*"))


@pytest.fixture(scope="session")
def app_url(browser, tmp_path_factory, app_tmp, poll_until) -> str:
    """`streamlit run app.py` on a free port, for the session; its log is in the session's temp
    dir. Once the app has stopped, nothing of its own is left in its temporary folder: every
    directory a job made (an upload's import, a run log's calibration, a run's copies) is removed
    when the job ends, or at the latest with the app."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("streamlit") / "streamlit.log"
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"),
           "--server.headless", "true", "--server.address", "127.0.0.1", "--server.port", str(port),
           "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none", "--global.developmentMode", "false"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL,
                                env={**os.environ, "TMPDIR": str(app_tmp)})
    url = f"http://127.0.0.1:{port}"
    if not poll_until(lambda: _healthy(url) or proc.poll() is not None, SERVER_START_S) or \
            proc.poll() is not None:
        proc.kill()
        pytest.fail(f"streamlit did not start (exit {proc.poll()}):\n"
                    f"{log_path.read_text()[-3000:]}")
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    assert not left_behind(app_tmp), f"the app left {left_behind(app_tmp)} in its temp folder"


@pytest.fixture()
def page(browser, app_url, tmp_path, request):
    """A new browser context (a new Streamlit session); a screenshot is saved at the end, pass or
    fail."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    context.set_default_timeout(PAGE_S * 1000)
    pg = context.new_page()
    pg.app_url = app_url
    track(pg)
    yield pg
    try:
        pg.screenshot(path=str(tmp_path / f"{request.node.name[:80]}-end.png"))
    finally:
        context.close()


@pytest.fixture()
def new_tab(browser, app_url) -> Callable:
    """new_tab(path): another tab of the app at APP/path (a browser context of its own: a new
    Streamlit session), its runs tracked; closed with the test."""
    contexts = []

    def _open(path: str):
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.set_default_timeout(PAGE_S * 1000)
        contexts.append(context)
        tab = context.new_page()
        tab.app_url = app_url
        track(tab)
        tab.goto(f"{app_url}/{path}")
        return tab

    yield _open
    for context in contexts:
        try:
            context.close()
        except Exception:  # closed by the test already
            pass


@pytest.fixture()
def open_page() -> Callable:
    """open_page(page, path, ready_text): go to APP/path and wait until ready_text shows."""

    def _open(pg, path: str, ready_text: str):
        pg.goto(f"{pg.app_url}/{path}")
        appear(pg, pg.get_by_text(ready_text, exact=False))
        settle(pg)
        return pg

    return _open


def appear(pg, locator) -> None:
    """Wait until `locator` shows, or fail at once with the exception a broken page shows instead
    (not after PAGE_S with a timeout that does not say why)."""
    exception = pg.locator("[data-testid=stException]")
    locator.or_(exception).first.wait_for()
    assert exception.count() == 0, exception.first.inner_text()


@pytest.fixture(name="appear")
def appear_fixture() -> Callable:
    return appear


_IDLE = """() => document.querySelector(
  '[data-testid=stApp][data-test-script-state=notRunning]') !== null"""


def _finished(payload) -> bool:
    """Whether a frame the app sent is its "script run finished" message (a whole run or a
    fragment's; not one cut short by the next rerun)."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    if not isinstance(payload, bytes):
        return False
    msg = ForwardMsg()
    try:
        msg.ParseFromString(payload)
    except Exception:  # a frame of another kind
        return False
    return (msg.WhichOneof("type") == "script_finished"
            and msg.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN)


def track(pg) -> None:
    """Count the script runs the app tells page `pg` it finished, from the messages on its
    websocket (the page's script-state attribute can skip "running" when a run is quick). Call it
    before the page opens the app."""
    pg.tlt_runs, pg.tlt_socket = 0, None

    def count(payload) -> None:
        pg.tlt_runs += _finished(payload)

    def opened(ws) -> None:
        if ws.url.endswith("/_stcore/stream"):
            pg.tlt_socket = ws
            ws.on("framereceived", count)

    pg.on("websocket", opened)


def settle(pg) -> None:
    """Wait until no script run is going (the page's last run has finished)."""
    pg.wait_for_function(_IDLE)


@contextmanager
def rerun(pg):
    """`with rerun(page): <an action that changes a widget>`: waits, after the block, for the
    script run the action starts to finish, as the app announces it (not for a pause that a busy
    machine outlasts)."""
    settle(pg)
    done = pg.tlt_runs
    yield
    if pg.tlt_runs == done:  # not yet announced (frames are counted only while Playwright runs)
        pg.tlt_socket.wait_for_event("framereceived", predicate=_finished)
    settle(pg)


def grid_cells(grid, must: tuple[str, ...] = ()) -> list[str]:
    """The text of a data grid's cells, once it holds `must` (each a cell's whole text). The grid
    draws on a canvas and fills the accessible table behind it once it is on screen, when it
    pleases: this waits for that, not for a pause."""
    grid.scroll_into_view_if_needed()
    grid.page.wait_for_function(
        """([e, must]) => {
          const cells = Array.from(e.querySelectorAll('td, th')).map(c => c.textContent);
          return cells.length > 0 && must.every(m => cells.includes(m));
        }""",
        arg=[grid.element_handle(), list(must)],
    )
    return grid.evaluate("e => Array.from(e.querySelectorAll('td, th')).map(c => c.textContent)")


def laid_out(pg) -> None:
    """Wait until every Plotly chart on show is drawn at its container's width (after a resize,
    Plotly re-lays its charts out a moment later)."""
    pg.wait_for_function(
        """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
          .filter(e => e.getBoundingClientRect().width > 0)  // not in a closed expander
          .every(e => e._fullLayout !== undefined
                 && Math.abs(e._fullLayout.width - e.getBoundingClientRect().width) < 2)"""
    )


@pytest.fixture(name="rerun")
def rerun_fixture() -> Callable:
    return rerun


@pytest.fixture(name="grid_cells")
def grid_cells_fixture() -> Callable:
    return grid_cells


@pytest.fixture(name="laid_out")
def laid_out_fixture() -> Callable:
    return laid_out


@pytest.fixture()
def healthy() -> Callable:
    """healthy(page): assert the page shows no uncaught exception, no error box and no 'Page not
    found'."""

    def _check(pg, errors_ok: bool = False) -> None:
        exceptions = pg.locator("[data-testid=stException]")
        assert exceptions.count() == 0, exceptions.first.inner_text()
        assert pg.get_by_text("Page not found").count() == 0, "Streamlit says 'Page not found'"
        if not errors_ok:
            errors = pg.locator("[data-testid=stAlertContentError]")
            assert errors.count() == 0, errors.first.inner_text()

    return _check


@pytest.fixture()
def shot(tmp_path) -> Callable:
    """shot(page, name, show=None): a screenshot under the test's temporary directory; returns its
    path. `show`: a text scrolled into view first (Streamlit scrolls inside a div, so a full-page
    shot would still show only the viewport)."""

    def _shot(pg, name: str, show: str | None = None) -> Path:
        if show is not None:
            pg.get_by_text(show).first.scroll_into_view_if_needed()
        path = tmp_path / f"{name}.png"
        pg.screenshot(path=str(path))
        assert path.stat().st_size > 10_000  # a rendered page, not a blank one
        return path

    return _shot


@pytest.fixture()
def docs_shot() -> Callable:
    """docs_shot(page, name, show=None): with TLT_DOCS_SHOTS=DIR, a tall screenshot for the docs
    written to DIR/name, from the top of the page or from the text `show` (`TLT_DOCS_SHOTS=docs
    python -m pytest tests/browser/...` rewrites the pictures README.md shows)."""

    def _shot(pg, name: str, show: str | None = None, height: int = 2600) -> None:
        target = os.environ.get("TLT_DOCS_SHOTS")
        if not target:
            return
        pg.mouse.move(5, 5)  # no tooltip over the picture
        pg.set_viewport_size({"width": 1400, "height": height})
        laid_out(pg)  # the charts re-lay out at the new size
        if show is None:
            pg.locator("h1").first.scroll_into_view_if_needed()
        else:
            pg.get_by_text(show).first.evaluate("e => e.scrollIntoView({block: 'start'})")
            laid_out(pg)
        pg.screenshot(path=str(Path(target) / name))
        pg.set_viewport_size({"width": 1400, "height": 1000})

    return _shot


@pytest.fixture()
def widgets() -> "Widgets":
    return Widgets()


class Widgets:
    """Set Streamlit widgets the way a user does (type, pick, click), then wait for the run the
    change starts. A widget already at the value asked for is left alone (no run would start)."""

    def number(self, pg, label: str, value: float) -> None:
        label_text = pg.get_by_text(label, exact=True)
        box = pg.locator("[data-testid=stNumberInput]").filter(has=label_text).first
        self._type(pg, box.locator("input"), str(value))

    def text(self, pg, label: str, value: str) -> None:
        label_text = pg.get_by_text(label, exact=True)
        box = pg.locator("[data-testid=stTextInput]").filter(has=label_text).first
        self._type(pg, box.locator("input"), value)

    def _type(self, pg, field, value: str) -> None:
        settle(pg)
        if field.input_value() == value:
            return
        with rerun(pg):
            field.fill(value)
            field.press("Enter")

    def select(self, pg, label: str, option: str, filter_text: bool = False) -> None:
        """Pick `option` (typed into the box first with `filter_text`: a long list)."""
        label_text = pg.get_by_text(label, exact=True)
        box = pg.locator("[data-testid=stSelectbox]").filter(has=label_text).first
        settle(pg)
        if box.locator("input").input_value() == option or \
                box.get_by_text(option, exact=True).count() > 0:
            return
        with rerun(pg):
            box.locator("input").click()
            if filter_text:
                box.locator("input").fill(option)
            pg.get_by_role("option", name=option, exact=True).click()

    def radio(self, pg, option: str) -> None:
        """Choose the radio button labelled `option`."""
        settle(pg)
        choice = pg.locator("[data-testid=stRadio] label").filter(
            has=pg.get_by_text(option, exact=True)).first
        if choice.locator("input").is_checked():
            return
        with rerun(pg):
            choice.click()

    def click(self, pg, label: str) -> None:
        with rerun(pg):
            pg.get_by_role("button", name=label, exact=True).click()

    def download(self, pg, label: str, dest: Path, timeout_s: float = PAGE_S) -> Path:
        with pg.expect_download(timeout=timeout_s * 1000) as info:
            pg.get_by_role("button", name=label).first.click()
        info.value.save_as(str(dest))
        return dest
