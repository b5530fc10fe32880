"""Train (real) page: start calibrated real training (`tlt train`) in the background and watch a
run.

The form mirrors `tlt train`'s options (workbench/cli/train.py). Everything is checked here first
(the model directory, the policy, `RunConfig.check`, a run directory that holds a run without
"Resume"), so a run that would fail at once never starts; the run directory starts as one that
holds no run (`default_run_dir`), so a finished run never greets the page with a refusal. "Start"
launches the venv's `tlt train` as a process of its own (workbench/ui/background_runs.py): every
tab of the app sees it, running with its Stop or ended with how it ended, and it is reaped the
moment it exits.

The monitor (`workbench/ui/run_monitor.py`) reads any run directory, running or finished: by
default the page's run, else the newest under runs/. A run started here is watched by itself: the
status and the monitor are a fragment that Streamlit's front end reruns every REFRESH_S seconds
while the run goes on (a sleep loop would hold the script run, and hang AppTest); "Refresh" reads
any other run directory again. A run that exits with an error is shown as failed, with the error
its log ends on; a run started elsewhere is judged by its log alone.
"""

from __future__ import annotations

import hashlib
import shlex
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from real.run.coordinator import RunConfig, TrainError, default_drafter
from workbench.contracts.policy import load_policy, policy_presets
from workbench.contracts.workload import RESPONSE_CAP
from workbench.ui import background_runs as runs
from workbench.ui.inputs import notices
from workbench.ui.run_monitor import LOG_NAME, find_failure, log_tail, show_run
from workbench.ui.run_prediction_view import show_prediction

# Relative paths are read from the workbench root, and `tlt train` runs there, so the form, the
# checks and the run all see the same files whichever directory `streamlit run` started in.
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = "traces/reference/model"
# The paper's configuration as vLLM runs it (chains); `tlt` (the paper's trees) is simulator-only.
DEFAULT_POLICY = "tlt-vllm"
# uploaded policies: the run is another process and needs a file
RUNS = ROOT / "runs"  # where the form's run directories go
UPLOAD_DIR = ROOT / "runs" / "policies"

RUN_KEY = "train"  # the page's background run (workbench/ui/background_runs.py)
_KEY_MONITOR = "train_monitor_dir"
_KEY_WAS_RUNNING = "train_was_running"
_KEY_SEEDED = "train_form_seeded"  # the session's form was filled once (from a running run's)
REFRESH_S = 3.0  # while a run started here goes on, its status and monitor redraw this often


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


def resolve(path: str) -> Path:
    p = Path(path.strip()).expanduser()
    return p if p.is_absolute() else ROOT / p


# ---------------------------------------------------------------- checks and the command


def check_form(form: TrainForm) -> tuple[RunConfig | None, list[str]]:
    """The run's RunConfig, or None and every problem found (each names the field and the fix)."""
    problems: list[str] = []
    model = resolve(form.model)
    if not (model / "config.json").is_file():
        problems.append(f"Model directory '{form.model}' has no config.json: give "
                        f"a Hugging Face model directory (e.g. {DEFAULT_MODEL}).")
    policy = None
    try:
        name = form.policy if form.policy in policy_presets() else resolve(form.policy)
        with notices():
            policy = load_policy(name)
    except ValueError as exc:
        # ConfigError / FieldError: their text names the field and what is allowed
        problems.append(policy_problem(form.policy, exc))
    for name, value in (("steps", form.steps), ("workers", form.workers)):
        if value < 1:
            problems.append(f"{name.capitalize()} is {value}: must be >= 1.")
    if not form.out.strip():
        problems.append("Give a run directory.")
    elif not form.resume and (resolve(form.out) / "checkpoints").exists():
        # TrainingRun.open refuses this too, but only after the process started; say it here.
        problems.append(occupied(form.out))
    if problems:
        return None, problems
    drafter = default_drafter(model, policy,
                              resolve(form.drafter) if form.drafter.strip() else None)
    cfg = RunConfig(model=model, policy=policy, out=resolve(form.out), steps=form.steps,
                    workers=form.workers, seed=form.seed, prompts=form.prompts,
                    samples=form.samples, max_tokens=form.max_tokens, drafter=drafter)
    try:
        # the rest of `tlt train`'s own checks (rollout mode, prompts >= workers, drafter)
        cfg.check()
    except TrainError as exc:
        return None, [str(exc)]
    return cfg, []


def policy_problem(policy: str, exc: ValueError) -> str:
    """Why the policy does not load, naming the file as the user knows it: an uploaded file by
    its own name (not the copy under runs/policies/), and once."""
    path = resolve(policy)
    shown = path.name.split("-", 1)[1] if path.parent == UPLOAD_DIR else policy
    why = str(exc)
    for prefix in (f"{path}: ", f"{policy}: "):
        why = why.removeprefix(prefix)
    return f"Policy '{shown}' does not load: {why.replace(str(path), shown)}"


def occupied(out: str) -> str:
    return (f"Run directory '{out}' holds a run already: tick Resume to continue it, or choose "
            "another directory.")


def taken(path: Path) -> bool:
    """Whether a run directory holds a run (its checkpoints or its log), or is the one this page's
    run writes."""
    run = runs.current(RUN_KEY)
    return ((path / "checkpoints").exists() or (path / LOG_NAME).exists()
            or (run is not None and run.out == path))


def _shown(path: Path) -> str:
    """A path as the form shows it: relative to the workbench root where it lies under it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def default_run_dir(label: str, seed: int, resume: bool) -> str:
    """The form's run directory: the first of runs/LABEL-SEED, runs/LABEL-SEED-2, ... that holds
    no run, so a finished run never greets the page with a refusal; with Resume, the last one
    that holds one (the run to continue)."""
    dirs = [RUNS / f"{label}-{seed}"]
    while taken(dirs[-1]):
        dirs.append(RUNS / f"{label}-{seed}-{len(dirs) + 1}")
    return _shown(dirs[-2] if resume and len(dirs) > 1 else dirs[-1])


def latest_run_dir() -> str | None:
    """The run directory under runs/ whose log changed last (a run of another session, or of the
    command line), for the monitor of a page that started none."""
    logs = list(RUNS.glob(f"*/{LOG_NAME}"))
    if not logs:
        return None
    return _shown(max(logs, key=lambda f: f.stat().st_mtime).parent)


def tlt_executable() -> list[str]:
    # The venv's own `tlt` (next to this interpreter):
    # the run uses the app's packages whatever PATH says.
    exe = Path(sys.executable).with_name("tlt")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "workbench.cli"]


def train_command(cfg: RunConfig, form: TrainForm) -> list[str]:
    """`tlt train` with the checked config's options (absolute paths: see ROOT)."""
    policy = form.policy if form.policy in policy_presets() else str(resolve(form.policy))
    argv = [*tlt_executable(), "train", "--model", str(cfg.model), "--policy", policy, "--steps",
            str(cfg.steps), "--workers", str(cfg.workers), "--seed", str(cfg.seed), "--prompts",
            str(cfg.prompts), "--samples", str(cfg.samples), "--max-tokens", str(cfg.max_tokens),
            "--out", str(cfg.out)]
    if cfg.drafter is not None:
        argv += ["--drafter", str(cfg.drafter)]
    if form.resume:
        argv.append("--resume")
    return argv


# ---------------------------------------------------------------- the background run


def _show_launch() -> None:
    run = runs.current(RUN_KEY)
    if run is None:
        return
    rc = run.proc.poll()
    c1, c2 = st.columns([4, 1])
    where = f"(pid {run.proc.pid}) · `{run.out}`"
    if rc is None:
        state = "stopping (SIGTERM sent)" if run.stopping else "running"
        c1.info(f"{state} {where} · started "
                f"{time.strftime('%H:%M:%S', time.localtime(run.started))}")
        if c2.button("Stop", key="train_stop",
                     help="SIGTERM to the run's process group; the last checkpoint stays."):
            runs.stop(run)
            st.rerun()
    elif rc == 0:
        c1.success(f"finished {where}")
    elif rc == -signal.SIGTERM or run.stopping:
        c1.warning(f"stopped {where}, exit code {rc}: the last finished "
                   "step's checkpoint stays; tick Resume to continue it.")
    else:
        tail = log_tail(run.out / LOG_NAME, lines=200)
        failure = find_failure(tail) if tail else None
        c1.error(f"failed {where}, exit code {rc}: " + (
            failure.message if failure else "see train.log below."))
        if failure is not None:
            with st.expander("The error", expanded=True):
                st.code(failure.detail, language=None)


# ---------------------------------------------------------------- the monitor


def _monitor(default_dir: str) -> None:
    st.subheader("Monitor")
    st.session_state.setdefault(_KEY_MONITOR, default_dir)
    c1, c2 = st.columns([4, 1])
    path = c1.text_input("Run directory to watch", key=_KEY_MONITOR,
                         help="Any run directory of `tlt train`, running or finished.")
    # a click reruns the page
    c2.button("Refresh", key="train_refresh", help="Read the run directory again.")
    run_dir = resolve(path)
    if not path.strip() or not run_dir.is_dir():
        st.info(f"No run directory at `{path}` yet.")
        return
    run = runs.current(RUN_KEY)
    ours = run is not None and run.out == run_dir
    running = ours and run.running
    if not ours:  # a run started elsewhere: its log is all there is to say how it ended
        tail = log_tail(run_dir / LOG_NAME, lines=200)
        failure = find_failure(tail) if tail else None
        if failure is not None:
            st.error(f"The log ends with an error: {failure.message}")
    show_run(run_dir, total=run.steps if ours else None, running=running)
    if not running and (run_dir / "trace" / "rl_steps.parquet").is_file():
        show_prediction(run_dir, ROOT)


def _live(default_dir: str) -> None:
    """The run's status and the monitor; while a run started here goes on, this part reruns by
    itself every REFRESH_S seconds (a fragment: the form keeps its state), and once more in full
    when the run ends, so Start comes back."""
    runs.rerun_once_finished(RUN_KEY, _KEY_WAS_RUNNING)
    _show_launch()
    _monitor(default_dir)


# ---------------------------------------------------------------- the form and the page


def _pick_policy() -> tuple[str, str]:
    """The policy argument (a preset name or a file
    path) and a label for the default run directory."""
    source = st.radio("Policy", ["Preset", "File"], horizontal=True, key="train_policy_source")
    if source == "Preset":
        presets = policy_presets()
        name = st.selectbox("Policy preset", presets, key="train_policy_preset",
                            **_given("train_policy_preset", index=presets.index(DEFAULT_POLICY)
                                     if DEFAULT_POLICY in presets else 0))
        return name, name
    upload = st.file_uploader("Upload a policy file", type=["yaml", "yml", "json"],
                              key="train_policy_upload")
    if upload is not None:
        data = upload.getvalue()
        # Named by content, so uploading the same file again reuses it.
        dst = UPLOAD_DIR / f"{hashlib.sha1(data).hexdigest()[:10]}-{Path(upload.name).name}"
        if not dst.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(data)
        return str(dst), Path(upload.name).stem
    path = st.text_input("or a policy file path", key="train_policy_path",
                         help="YAML/JSON, e.g. one `tlt tune` wrote.")
    return path, Path(path).stem if path.strip() else "policy"


def _int(col, label: str, value: int, key: str, min_value: int = 1, hlp: str | None = None) -> int:
    return int(col.number_input(label, min_value=min_value, step=1, key=key, help=hlp,
                                **_given(key, value=value)))


def _given(key: str, **default) -> dict:
    """A widget's default (`value=` or `index=`), unless the session already holds its value (a
    running run's form seeded it: Streamlit warns when a widget gets both)."""
    return {} if key in st.session_state else default


def seed_from_running_run() -> None:
    """A session that opens while a run started here goes on (a reload, another tab) shows that
    run's form, not the defaults; once, so the user's edits stay. The run directory is left to
    follow the runs there, as in the tab that started it."""
    if st.session_state.get(_KEY_SEEDED):
        return
    st.session_state[_KEY_SEEDED] = True
    run = runs.current(RUN_KEY)
    form = run.form if run is not None and run.running else None
    if not isinstance(form, TrainForm):
        return
    preset = form.policy in policy_presets()
    st.session_state.update({
        "train_model": form.model, "train_policy_source": "Preset" if preset else "File",
        "train_steps": form.steps, "train_workers": form.workers, "train_seed": form.seed,
        "train_prompts": form.prompts, "train_samples": form.samples,
        "train_max_tokens": form.max_tokens, "train_resume": form.resume,
        "train_drafter": form.drafter,
        ("train_policy_preset" if preset else "train_policy_path"):
            form.policy if preset else _shown(resolve(form.policy))})


def _form() -> TrainForm:
    seed_from_running_run()
    c1, c2, c3 = st.columns([1.4, 1, 1])
    with c1:
        model = st.text_input("Model directory", key="train_model",
                              **_given("train_model", value=DEFAULT_MODEL),
                              help="A Hugging Face model directory; relative "
                                   "paths are from the workbench root.")
        policy, label = _pick_policy()
    steps = _int(c2, "Steps", 20, "train_steps",
                 hlp="RL steps in all, counting those done before a resume.")
    workers = _int(c2, "Workers", 2, "train_workers",
                   hlp="Rollout workers (Ray actors, one vLLM engine each).")
    seed = _int(c2, "Seed", 0, "train_seed", min_value=0)
    prompts = _int(c2, "Prompts per step", 16, "train_prompts")
    samples = _int(c3, "Samples per prompt", 4, "train_samples", min_value=2, hlp="The GRPO group.")
    max_tokens = _int(c3, "Max tokens", 1024, "train_max_tokens", min_value=RESPONSE_CAP[0],
                      hlp="Response cap in tokens.")
    resume = c3.checkbox("Resume", value=False, key="train_resume",
                         help="Continue the run in the run directory from its last finished step.")
    # The key follows the default, so the directory follows the policy, the seed, Resume and the
    # runs already there until the user edits it.
    default = default_run_dir(label, seed, resume)
    out = c3.text_input("Run directory", value=default, key=f"train_out:{label}:{seed}:{default}",
                        help="checkpoints/, metrics.csv, trace/, drafter/ and train.log go here.")
    with c1.expander("More"):
        drafter = st.text_input("Warm-start drafter directory", key="train_drafter",
                                **_given("train_drafter", value=""),
                                help="For policies with drafter.warm_start; "
                                     "empty: the reference model's own.")
    return TrainForm(model, policy, steps, workers, seed, prompts, samples, max_tokens, out, resume,
                     drafter)


def render() -> None:
    st.title("Train (real)")
    st.caption("Run calibrated real training: GRPO on vLLM rollouts with spot "
               "drafter training and adaptive speculative decoding (`tlt "
               "train`), in the background; watch its steps and worker timelines.")
    form = _form()
    cfg, problems = check_form(form)
    run = runs.current(RUN_KEY)
    for problem in problems:
        # The directory of the run started here holds that
        # run: a fact to state, not a mistake in the form.
        if run is not None and problem == occupied(form.out) and resolve(form.out) == run.out:
            st.info(f"Run directory '{form.out}' holds the run started here: tick "
                    "Resume to continue it, or choose another directory for a new run.")
        else:
            st.error(problem)
    running = runs.is_running(RUN_KEY)
    clicked = st.button("Start", type="primary", disabled=bool(problems) or running,
                        key="train_start")
    if cfg is not None:
        argv = train_command(cfg, form)
        st.caption(f"`{shlex.join(argv)}`")
        # A disabled button cannot be clicked in a browser, but another tab may have started a run
        # since it was drawn: the launch itself refuses then.
        if clicked and not running:
            try:
                runs.launch(RUN_KEY, argv, cfg.out, ROOT, form.resume, cfg.steps, LOG_NAME,
                            form)
            except RuntimeError:
                st.rerun()
            st.session_state[_KEY_MONITOR] = str(cfg.out)  # watch the new run
            st.rerun()  # redraw with the run going: Start disabled, Stop shown
    if running:
        st.caption("One run at a time from this page (in any tab): stop the current one to start "
                   "another.")
    st.divider()
    watch = str(run.out) if run is not None else latest_run_dir() or form.out
    st.fragment(_live, run_every=REFRESH_S if running else None)(watch)
