"""Calibrate page: calibrate this machine in one run (`tlt calibrate --model`), and read a report.

"Calibrate this machine" starts `tlt calibrate --model M [--drafter D] --out P.yaml` in the
background, as the Train page starts `tlt train` (its own process group, its log beside the
profile), and shows the log's progress lines while it runs. The report part reads any
`P.calibration.json` (`tlt calibrate` writes one beside every profile): the fit's held-out
error, the held-out captures predicted against measured (after drift normalisation and raw),
step latency measured against predicted per batch bucket, the machine's drift through the run,
and every fitted parameter (`workbench/ui/calibration_report.py` draws it).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from workbench.ui import background_runs as runs
from workbench.ui.calibration_report import show_report
from workbench.ui.run_monitor import find_failure, log_tail
from workbench.ui.train_page import ROOT, resolve, tlt_executable

DEFAULT_MODEL = "traces/reference/model"
DEFAULT_DRAFTER = "traces/reference/drafter"
DEFAULT_OUT = "runs/calibration/this-machine.yaml"
# `tlt calibrate --model` on the reference model
SHIPPED_REPORT = "traces/reference/self-calibration/machine.calibration.json"
REFRESH_S = 3.0
RUN_KEY = "calibrate"  # the page's background run (workbench/ui/background_runs.py)
_KEY_WAS_RUNNING = "calibrate_was_running"
_KEY_REPORT = "calibrate_report_path"


@dataclass(frozen=True)
class CalibrateForm:
    """What the form asks for; paths as typed (relative ones are under the workbench root)."""

    model: str
    drafter: str  # empty: no EAGLE captures
    out: str  # the profile to write (.yaml, .yml or .json)


def check_form(form: CalibrateForm) -> list[str]:
    """Every problem found before anything starts; each names the field and the fix."""
    problems = []
    if not (resolve(form.model) / "config.json").is_file():
        problems.append(f"Model directory '{form.model}' has no config.json: give "
                        f"a Hugging Face model directory (e.g. {DEFAULT_MODEL}).")
    if form.drafter.strip() and not resolve(form.drafter).is_dir():
        problems.append(f"Drafter directory '{form.drafter}' does not exist: give "
                        f"an EAGLE drafter directory (e.g. {DEFAULT_DRAFTER}) or "
                        "leave it empty to calibrate without EAGLE.")
    if Path(form.out.strip()).suffix not in (".yaml", ".yml", ".json"):
        problems.append(f"Profile file '{form.out}': give a .yaml, .yml or .json file name.")
    return problems


def report_path(profile: Path) -> Path:
    """Where `tlt calibrate` writes the report of the profile `profile`."""
    return profile.with_name(profile.stem + ".calibration.json")


def log_path(profile: Path) -> Path:
    """Where the page sends the output of `tlt calibrate` for the profile `profile`."""
    return profile.with_name(profile.stem + ".calibrate.log")


def calibrate_command(form: CalibrateForm) -> list[str]:
    argv = [*tlt_executable(), "calibrate", "--model", str(resolve(form.model)), "--out",
            str(resolve(form.out))]
    if form.drafter.strip():
        argv += ["--drafter", str(resolve(form.drafter))]
    return argv


def _show_launch() -> None:
    run = runs.current(RUN_KEY)
    if run is None:
        return
    rc = run.proc.poll()
    log = log_path(Path(run.argv[run.argv.index("--out") + 1]))
    c1, c2 = st.columns([4, 1])
    if rc is None:
        c1.info(f"calibrating (pid {run.proc.pid}) · log `{log}`")
        if c2.button("Stop", key="calibrate_stop",
                     help="SIGTERM: nothing half-written is left behind."):
            runs.stop(run)
            st.rerun()
    elif rc == 0:
        c1.success(f"finished: `{log}`")
    else:
        tail = log_tail(log, lines=200)
        failure = find_failure(tail) if tail else None
        c1.error(f"calibration failed, exit code {rc}: " + (
            failure.message if failure else "see the log below."))
    tail = log_tail(log)
    done = progress_of(tail) if tail and rc is None else None
    if done is not None:
        st.progress(done[0], text=done[1])
    if tail:
        with st.expander("Progress (the log's last lines)", expanded=rc is None):
            st.code(tail, language=None)


def _took() -> str:
    """How long the shipped calibration took (its report's own figure), not a fixed estimate."""
    try:
        wall = json.loads(resolve(SHIPPED_REPORT).read_text()).get("self_calibration", {}).get(
            "wall_s")
    except (OSError, ValueError):
        return ""
    return f" (the shipped calibration took {wall / 60:.1f} min on this project's 2-core machine)" \
        if isinstance(wall, (int, float)) else ""


_PROGRESS = re.compile(r"\[(\d+)/(\d+)\] (.*)$")


def progress_of(tail: str) -> tuple[float, str] | None:
    """The calibration's own progress from its log: the last `[done/total] message (... ETA ...)`
    line."""
    for line in reversed(tail.splitlines()):
        m = _PROGRESS.search(line.strip())
        if m and int(m.group(2)) > 0:
            return min(1.0, int(m.group(1)) / int(m.group(2))), m.group(0)
    return None


def _live() -> None:
    """The calibration's status and log; reruns by itself while it goes on, then once in full."""
    runs.rerun_once_finished(RUN_KEY, _KEY_WAS_RUNNING)
    _show_launch()


def _form() -> CalibrateForm:
    c1, c2, c3 = st.columns(3)
    model = c1.text_input("Model directory", value=DEFAULT_MODEL, key="calibrate_model",
                          help="The model to calibrate the machine with; "
                               "relative paths are from the workbench root.")
    drafter = c2.text_input("EAGLE drafter directory", value=DEFAULT_DRAFTER,
                            key="calibrate_drafter",
                            help="Its captures fit the EAGLE drafter's "
                                 "cost and acceptance; empty: none.")
    out = c3.text_input("Profile to write", value=DEFAULT_OUT, key="calibrate_out",
                        help="Beside it: .calibration.json (the "
                             "report), .workload.yaml and .captures/.")
    return CalibrateForm(model, drafter, out)


def _report_section(form: CalibrateForm) -> None:
    st.subheader("Calibration report")
    ours = report_path(resolve(form.out))
    default = SHIPPED_REPORT
    if ours.is_file() and ours.is_relative_to(resolve(".")):
        default = str(ours.relative_to(resolve(".")))
    st.session_state.setdefault(_KEY_REPORT, default)
    path = st.text_input("Report file", key=_KEY_REPORT,
                         help="Any .calibration.json `tlt calibrate` wrote (beside its profile).")
    show_report(resolve(path))


def render() -> None:
    st.title("Calibrate")
    st.caption("Calibrate this machine in one run: capture rollouts with no SD, n-gram "
               "and EAGLE (interleaved, with a reference measurement repeated through "
               "the run to take out the machine's drift), fit the profile, and validate "
               "it on held-out captures taken in the same run (`tlt calibrate --model`).")
    form = _form()
    problems = check_form(form)
    for problem in problems:
        st.error(problem)
    running = runs.is_running(RUN_KEY)
    clicked = st.button("Calibrate this machine", type="primary",
                        disabled=bool(problems) or running, key="calibrate_start")
    if not problems:
        argv = calibrate_command(form)
        st.caption(f"`{shlex.join(argv)}`" + _took())
        if clicked and not running:
            out = resolve(form.out)
            try:
                runs.launch(RUN_KEY, argv, out.parent, ROOT, resume=False, steps=0,
                            log_name=log_path(out).name)
            except RuntimeError:  # another tab started one since this page was drawn
                st.rerun()
            st.session_state[_KEY_REPORT] = str(report_path(Path(form.out.strip())))
            st.rerun()
    st.fragment(_live, run_every=REFRESH_S if running else None)()
    st.divider()
    _report_section(form)
