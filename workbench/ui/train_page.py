"""Train (real) page: start calibrated real training (`tlt train`) in the background and watch a run.

The form mirrors `tlt train`'s options (workbench/cli/real.py). Everything is checked
here first (the model directory, the policy, `RunConfig.check`, a run directory
that holds a run without "Resume"), so a run that would fail at once never starts.
"Start" launches the venv's `tlt train` as a process of its own: the run
outlives the page's reruns (its Popen handle lives in st.session_state) and
"Stop" sends SIGTERM to its process group, Ray's and vLLM's children included.

The monitor reads any run directory, running or finished: metrics.csv (a row per
finished RL step, rewritten atomically after each), the tail of train.log, and
the last RL step's worker timeline from trace/ (the simulator's timeline format,
so the What-if page's Gantt chart draws it). It never polls by itself: a sleep
loop would hold the script run (and hang AppTest); "Refresh" reruns the page.
"""

from __future__ import annotations

import hashlib
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import streamlit as st

from real.run.coordinator import RunConfig, TrainError, default_drafter
from real.run.records import METRIC_COLUMNS
from workbench.contracts.policy import load_policy, policy_presets
from workbench.contracts.trace import TraceError, load_trace
from workbench.ui.charts import gantt_figure, metric_lines_figure
from workbench.ui.whatif import MAX_GANTT_WORKERS

# Relative paths are read from the workbench root, and `tlt train` runs there, so the form, the
# checks and the run all see the same files whichever directory `streamlit run` started in.
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = "traces/reference/model"
DEFAULT_POLICY = "tlt-cold"  # the real backend runs chains: `tlt` (the paper's trees) is simulator-only
UPLOAD_DIR = ROOT / "runs" / "policies"  # uploaded policies: the run is another process and needs a file
LOG_NAME = "train.log"
LOG_LINES = 40
_LOG_TAIL_BYTES = 64 * 1024  # enough for LOG_LINES lines; a long run's log is never read whole
STOP_WAIT_S = 5.0  # how long "Stop" waits for the run to exit before it reports "stopping"

_STATE_LAUNCH = "train_launch"
_KEY_MONITOR = "train_monitor_dir"

# (title, metrics.csv columns): one line chart each.
_LINE_PANELS = (
    ("Step and rollout time (s)", ("step_s", "rollout_s")),
    ("Mean accepted length (tokens / verify pass)", ("mean_accept_len",)),
    ("Reward", ("reward",)),
)


@dataclass(frozen=True)
class TrainForm:
    """What the form asks for; paths as typed (relative ones are under ROOT)."""

    model: str
    policy: str  # a preset name or a policy file path
    steps: int
    workers: int
    seed: int
    prompts: int
    samples: int
    max_tokens: int
    out: str
    resume: bool = False
    drafter: str = ""  # warm-start drafter; empty: the CLI's default (the reference model's own)


@dataclass
class Launch:
    """A `tlt train` started from this session."""

    proc: subprocess.Popen
    argv: list[str]
    out: Path
    started: float
    stopping: bool = False


def resolve(path: str) -> Path:
    p = Path(path.strip()).expanduser()
    return p if p.is_absolute() else ROOT / p


# ---------------------------------------------------------------- checks and the command


def check_form(form: TrainForm) -> tuple[RunConfig | None, list[str]]:
    """The run's RunConfig, or None and every problem found (each names the field and the fix)."""
    problems: list[str] = []
    model = resolve(form.model)
    if not (model / "config.json").is_file():
        problems.append(f"Model directory '{form.model}' has no config.json: give a Hugging Face model directory "
                        f"(e.g. {DEFAULT_MODEL}).")
    policy = None
    try:
        policy = load_policy(form.policy if form.policy in policy_presets() else resolve(form.policy))
    except ValueError as exc:  # ConfigError / FieldError: their text names the field and what is allowed
        problems.append(f"Policy '{form.policy}' does not load: {exc}")
    for name, value in (("steps", form.steps), ("workers", form.workers)):
        if value < 1:
            problems.append(f"{name.capitalize()} is {value}: must be >= 1.")
    if not form.out.strip():
        problems.append("Give a run directory.")
    elif not form.resume and (resolve(form.out) / "checkpoints").exists():
        # TrainingRun.open refuses this too, but only after the process started; say it here.
        problems.append(f"Run directory '{form.out}' holds a run already: tick Resume to continue it, "
                        f"or choose another directory.")
    if problems:
        return None, problems
    drafter = default_drafter(model, policy, resolve(form.drafter) if form.drafter.strip() else None)
    cfg = RunConfig(model=model, policy=policy, out=resolve(form.out), steps=form.steps, workers=form.workers,
                    seed=form.seed, prompts=form.prompts, samples=form.samples, max_tokens=form.max_tokens,
                    drafter=drafter)
    try:
        cfg.check()  # the rest of `tlt train`'s own checks (rollout mode, prompts >= workers, drafter)
    except TrainError as exc:
        return None, [str(exc)]
    return cfg, []


def tlt_executable() -> list[str]:
    # The venv's own `tlt` (next to this interpreter): the run uses the app's packages whatever PATH says.
    exe = Path(sys.executable).with_name("tlt")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "workbench.cli"]


def train_command(cfg: RunConfig, form: TrainForm) -> list[str]:
    """`tlt train` with the checked config's options (absolute paths: see ROOT)."""
    policy = form.policy if form.policy in policy_presets() else str(resolve(form.policy))
    argv = [*tlt_executable(), "train", "--model", str(cfg.model), "--policy", policy, "--steps", str(cfg.steps),
            "--workers", str(cfg.workers), "--seed", str(cfg.seed), "--prompts", str(cfg.prompts),
            "--samples", str(cfg.samples), "--max-tokens", str(cfg.max_tokens), "--out", str(cfg.out)]
    if cfg.drafter is not None:
        argv += ["--drafter", str(cfg.drafter)]
    if form.resume:
        argv.append("--resume")
    return argv


# ---------------------------------------------------------------- the background run


def launch(argv: list[str], out: Path, resume: bool) -> Launch:
    out.mkdir(parents=True, exist_ok=True)
    # A resumed run appends, so the log keeps the earlier steps' lines.
    with open(out / LOG_NAME, "ab" if resume else "wb") as log:
        log.write(f"$ {shlex.join(argv)}\n".encode())
        log.flush()
        # start_new_session: the run is its own process group (pgid == pid), so Stop reaches its children,
        # and a closed browser tab or a Ctrl-C in the Streamlit terminal does not kill it.
        proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return Launch(proc, argv, out, time.time())


def stop(run: Launch) -> None:
    try:
        os.killpg(run.proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return  # it had exited already
    run.stopping = True
    try:
        run.proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        pass  # still shutting Ray down: the status says "stopping" until Refresh finds it gone


def _current() -> Launch | None:
    return st.session_state.get(_STATE_LAUNCH)


def _is_running() -> bool:
    run = _current()
    return run is not None and run.proc.poll() is None


def _show_launch() -> None:
    run = _current()
    if run is None:
        return
    rc = run.proc.poll()  # also reaps a finished child
    c1, c2 = st.columns([4, 1])
    if rc is None:
        state = "stopping (SIGTERM sent)" if run.stopping else "running"
        c1.info(f"{state} (pid {run.proc.pid}) · `{run.out}` · started {time.strftime('%H:%M:%S', time.localtime(run.started))}")
        if c2.button("Stop", key="train_stop", help="SIGTERM to the run's process group; the last checkpoint stays."):
            stop(run)
            st.rerun()
    elif rc == 0:
        c1.success(f"finished (pid {run.proc.pid}) · `{run.out}`")
    else:
        how = "stopped" if rc == -signal.SIGTERM else "failed"
        c1.warning(f"{how} (pid {run.proc.pid}, exit code {rc}) · `{run.out}`: see train.log below.")


# ---------------------------------------------------------------- reading a run directory


def read_metrics(run_dir: Path) -> pd.DataFrame | None:
    """metrics.csv with METRIC_COLUMNS first, or None before the first step finished."""
    file = run_dir / "metrics.csv"
    if not file.is_file():
        return None
    df = pd.read_csv(file)
    cols = [c for c in METRIC_COLUMNS if c in df.columns]
    return df[cols + [c for c in df.columns if c not in cols]]


def log_tail(file: Path, lines: int = LOG_LINES) -> str | None:
    if not file.is_file():
        return None
    with open(file, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - _LOG_TAIL_BYTES))
        text = f.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])  # splitlines also breaks vLLM's \r progress bars


def _stamp(trace_dir: Path) -> int:
    # The trace is rewritten (a fresh directory renamed in) after every step: newest file time = version.
    return max((f.stat().st_mtime_ns for f in trace_dir.iterdir()), default=0)


@st.cache_data(max_entries=8, show_spinner=False)
def last_step_timeline(trace_dir: str, stamp: int) -> tuple[int, pd.DataFrame] | None:
    """The last RL step's timeline rows, or None for a trace without a timeline. Cached per trace
    version (`stamp`), so reruns while the run goes on do not re-read the parquet files."""
    timeline = load_trace(trace_dir).timeline
    if timeline is None or timeline.empty:
        return None
    step = int(timeline["step"].max())
    return step, timeline[timeline["step"] == step].reset_index(drop=True)


def _show_tiles(df: pd.DataFrame) -> None:
    last = df.iloc[-1]
    cols = st.columns(4)
    cols[0].metric("Steps done", f"{len(df)}", help=f"Last finished RL step: {int(last['step'])}.")
    cols[1].metric("Last step time", f"{last['step_s']:.1f} s")
    accept = last["mean_accept_len"]
    cols[2].metric("Accepted length", "-" if math.isnan(accept) else f"{accept:.2f}")
    cols[3].metric("Reward", f"{last['reward']:.3f}")


def _show_metrics(run_dir: Path) -> None:
    try:
        df = read_metrics(run_dir)
    except (OSError, ValueError) as exc:  # pandas raises ValueError subclasses for a malformed CSV
        st.error(f"{run_dir / 'metrics.csv'} cannot be read: {exc}")
        return
    if df is None or df.empty:
        st.info(f"No metrics.csv in `{run_dir}` yet: it is written when the first RL step finishes.")
        return
    missing = [c for c in METRIC_COLUMNS if c not in df.columns]
    if missing:
        st.warning(f"metrics.csv lacks {', '.join(missing)}: written by another version of `tlt train`?")
    else:
        _show_tiles(df)
    st.dataframe(df, hide_index=True, width="stretch", key="train_metrics")
    st.plotly_chart(metric_lines_figure(df, _LINE_PANELS), key="train_lines", width="stretch")


def _show_timeline(run_dir: Path) -> None:
    trace_dir = run_dir / "trace"
    if not trace_dir.is_dir():
        return
    try:
        found = last_step_timeline(str(trace_dir), _stamp(trace_dir))
    except (TraceError, OSError) as exc:  # OSError: the trace was replaced while being read
        st.warning(f"The trace cannot be read: {exc}")
        return
    if found is None:
        st.info("The trace has no timeline table (a `tlt capture` trace, or an older `tlt train`).")
        return
    step, rows = found
    st.subheader(f"Worker timeline: RL step {step}")
    st.caption("Each bar is what a worker did. Red = idle (a bubble): the worker finished its share and waits "
               "for the slowest one; orange = drafter spot training in that time.")
    st.plotly_chart(gantt_figure(rows, max_workers=MAX_GANTT_WORKERS), key="train_gantt", width="stretch")


def _monitor(default_dir: str) -> None:
    st.subheader("Monitor")
    st.session_state.setdefault(_KEY_MONITOR, default_dir)
    c1, c2 = st.columns([4, 1])
    path = c1.text_input("Run directory to watch", key=_KEY_MONITOR,
                         help="Any run directory of `tlt train`, running or finished.")
    c2.button("Refresh", key="train_refresh", help="Read the run directory again.")  # a click reruns the page
    run_dir = resolve(path)
    if not path.strip() or not run_dir.is_dir():
        st.info(f"No run directory at `{path}` yet.")
        return
    _show_metrics(run_dir)
    _show_timeline(run_dir)
    tail = log_tail(run_dir / LOG_NAME)
    if tail is not None:
        st.markdown(f"**{LOG_NAME}** (last {LOG_LINES} lines)")
        st.code(tail or "(empty)", language=None)


# ---------------------------------------------------------------- the form and the page


def _pick_policy() -> tuple[str, str]:
    """The policy argument (a preset name or a file path) and a label for the default run directory."""
    source = st.radio("Policy", ["Preset", "File"], horizontal=True, key="train_policy_source")
    if source == "Preset":
        presets = policy_presets()
        name = st.selectbox("Policy preset", presets, key="train_policy_preset",
                            index=presets.index(DEFAULT_POLICY) if DEFAULT_POLICY in presets else 0)
        return name, name
    upload = st.file_uploader("Upload a policy file", type=["yaml", "yml", "json"], key="train_policy_upload")
    if upload is not None:
        data = upload.getvalue()
        # Named by content, so uploading the same file again reuses it.
        dst = UPLOAD_DIR / f"{hashlib.sha1(data).hexdigest()[:10]}-{Path(upload.name).name}"
        if not dst.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(data)
        return str(dst), Path(upload.name).stem
    path = st.text_input("or a policy file path", key="train_policy_path", help="YAML/JSON, e.g. one `tlt tune` wrote.")
    return path, Path(path).stem if path.strip() else "policy"


def _int(col, label: str, value: int, key: str, min_value: int = 1, hlp: str | None = None) -> int:
    return int(col.number_input(label, min_value=min_value, value=value, step=1, key=key, help=hlp))


def _form() -> TrainForm:
    c1, c2, c3 = st.columns([1.4, 1, 1])
    with c1:
        model = st.text_input("Model directory", value=DEFAULT_MODEL, key="train_model",
                              help="A Hugging Face model directory; relative paths are from the workbench root.")
        policy, label = _pick_policy()
    steps = _int(c2, "Steps", 20, "train_steps", hlp="RL steps in all, counting those done before a resume.")
    workers = _int(c2, "Workers", 2, "train_workers", hlp="Rollout workers (Ray actors, one vLLM engine each).")
    seed = _int(c2, "Seed", 0, "train_seed", min_value=0)
    prompts = _int(c2, "Prompts per step", 16, "train_prompts")
    samples = _int(c3, "Samples per prompt", 4, "train_samples", min_value=2, hlp="The GRPO group.")
    max_tokens = _int(c3, "Max tokens", 1024, "train_max_tokens", hlp="Response cap in tokens.")
    # The key follows the policy and seed, so the default directory follows them until the user edits it.
    out = c3.text_input("Run directory", value=f"runs/{label}-{seed}", key=f"train_out:{label}:{seed}",
                        help="checkpoints/, metrics.csv, trace/, drafter/ and train.log go here.")
    resume = c3.checkbox("Resume", value=False, key="train_resume",
                         help="Continue the run in the run directory from its last finished step.")
    with c1.expander("More"):
        drafter = st.text_input("Warm-start drafter directory", value="", key="train_drafter",
                                help="For policies with drafter.warm_start; empty: the reference model's own.")
    return TrainForm(model, policy, steps, workers, seed, prompts, samples, max_tokens, out, resume, drafter)


def render() -> None:
    st.title("Train (real)")
    st.caption("Run calibrated real training: GRPO on vLLM rollouts with spot drafter training and adaptive "
               "speculative decoding (`tlt train`), in the background; watch its steps and worker timelines.")
    form = _form()
    cfg, problems = check_form(form)
    for problem in problems:
        st.error(problem)
    running = _is_running()
    clicked = st.button("Start", type="primary", disabled=bool(problems) or running, key="train_start")
    if cfg is not None:
        argv = train_command(cfg, form)
        st.caption(f"`{shlex.join(argv)}`")
        # Check again at the click: a disabled button cannot be clicked in a browser, but the state may have
        # changed since it was drawn (another tab of this session started a run).
        if clicked and not running:
            st.session_state[_STATE_LAUNCH] = launch(argv, cfg.out, form.resume)
            st.session_state[_KEY_MONITOR] = form.out  # watch the new run
            st.rerun()  # redraw with the run going: Start disabled, Stop shown
    if running:
        st.caption("One run at a time from this page: stop the current one to start another.")
    st.divider()
    _show_launch()
    _monitor(form.out)
