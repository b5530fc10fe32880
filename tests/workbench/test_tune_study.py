"""A study's name and what a storage holds under it (issue 44, item 3): a second target on the
default name tunes instead of failing, a study that holds its trials says so instead of silently
running none, and a trial left RUNNING by a killed process is marked failed when the study is
opened again, with a notice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from workbench import tune
from workbench.cli import app
from workbench.contracts.profile import load_profile
from workbench.contracts.workload import load_workload
from workbench.tune.storage import PROCESS, mark_process

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = "polytrace-dapo-qwen2.5-32b"  # the Tune page's default: SGLang's own engine


def _spec(target: str, seeds: int = 1, **kw) -> tune.TuneSpec:
    wl = load_workload(WORKLOAD)
    return tune.TuneSpec(wl, load_profile(wl.profile), seeds=seeds, steps=1, target=target, **kw)


def test_the_default_name_follows_the_inputs_and_never_holds_other_ones(tmp_path):
    store = tune.make_storage(f"sqlite:///{tmp_path / 's.db'}")
    sglang, vllm = _spec("sglang"), _spec("vllm")
    assert tune.default_study_name(sglang) == f"tune-{WORKLOAD}"  # the workload's own engine
    assert tune.default_study_name(vllm) == f"tune-{WORKLOAD}-vllm"
    assert tune.default_study_name(_spec("vllm", multi_objective=True)) == \
        f"tune-{WORKLOAD}-vllm-mo"
    first = tune.free_study_name(sglang, store)
    tune.run_study(tune.open_study(sglang, first, store), sglang, 2)
    assert tune.free_study_name(sglang, store) == first  # the same inputs: resumed
    assert tune.study_status(sglang, first, store).finished == 2
    # another target on its default name: a study of its own, no refusal
    second = tune.free_study_name(vllm, store)
    assert second != first
    tune.run_study(tune.open_study(vllm, second, store), vllm, 2)
    # other seeds under the first's name would be refused; the free name is another
    two_seeds = _spec("sglang", seeds=2)
    status = tune.study_status(two_seeds, first, store)
    assert status.exists and "seeds was 1, now 2" in status.other_inputs
    assert tune.free_study_name(two_seeds, store) == f"{first}-2"


def _tune_page() -> None:
    from workbench.ui import tune_page

    tune_page.render()


def test_the_tune_page_tunes_a_second_target_and_says_when_a_study_is_full(tmp_path):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_tune_page, default_timeout=120)
    at.run()
    at.number_input(key="tune_trials").set_value(2)
    at.number_input(key="tune_seeds").set_value(1)
    at.number_input(key=f"tune_steps:{WORKLOAD}").set_value(1)
    at.text_input(key="tune_storage").set_value(f"sqlite:///{tmp_path / 'studies.db'}").run()
    assert any(c.value == "A new study: Run study runs 2 trials." for c in at.caption)
    assert not (tmp_path / "studies.db").exists()  # read to say what it holds, never made early
    at.button(key="tune_run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    first = at.session_state["tune_result"]
    assert first.spec.target == "sglang" and first.ran == 2

    # The same inputs: the page says the study is full before Run, and again after it.
    assert any("holds 2 finished trials" in w.value and "Raise **Trials**" in w.value
               for w in at.warning), [w.value for w in at.warning]
    at.button(key="tune_run").click().run()
    assert any("No trial ran now" in w.value for w in at.warning), [w.value for w in at.warning]

    # vLLM on the default name: a study of its own, run without a refusal.
    target = next(r for r in at.radio if r.key.startswith("tune_target:"))
    target.set_value("vllm").run()
    assert not any(s.value == "Results" for s in at.subheader)  # the SGLang study's, not shown
    at.button(key="tune_run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    second = at.session_state["tune_result"]
    assert second.spec.target == "vllm" and second.ran == 2
    assert second.study_name == f"tune-{WORKLOAD}-vllm"


def _tune_cmd(storage: str, trials: int, out: Path) -> list[str]:
    return [sys.executable, "-m", "workbench.cli", "tune", "--workload", "cpu-tiny", "--trials",
            str(trials), "--seeds", "3", "--steps", "3", "--storage", storage, "--study", "k",
            "--out", str(out)]


def _running(storage: str) -> list[int]:
    """The RUNNING trials that have started their work (recorded their process)."""
    study = optuna.load_study(study_name="k", storage=tune.make_storage(storage))
    return [t.number for t in study.get_trials(states=(TrialState.RUNNING,))
            if PROCESS in t.user_attrs]


def _kill_mid_trial(storage: str, cwd: Path) -> list[int]:
    """Start `tlt tune`, kill it (SIGKILL) while a trial runs; the trials left RUNNING."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(_tune_cmd(storage, 10_000, cwd / "t.yaml"), cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240  # a busy 2-core machine starts Python slowly
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no trial running within 240 s"
            try:
                if _running(storage):
                    break
            except KeyError:  # no study yet
                pass
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    return _running(storage)


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_trial_left_running_by_a_killed_process_is_failed_on_resume(tmp_path, kind):
    storage = (f"sqlite:///{tmp_path / 's.db'}" if kind == "sqlite"
               else f"journal:{tmp_path / 's.journal'}")
    left = []
    for _ in range(3):  # the kill may land between two trials: then try again
        left = _kill_mid_trial(storage, tmp_path)
        if left:
            break
    assert left, "every kill landed between trials"
    # At once (no heartbeat grace period to wait out), in this process: the notice names them.
    wl = load_workload("cpu-tiny")
    spec = tune.TuneSpec(wl, load_profile(wl.profile), seeds=3, steps=3,
                         target=tune.default_target(load_profile(wl.profile), wl))
    store = tune.make_storage(storage)
    status = tune.study_status(spec, "k", store)
    assert status.abandoned == len(left)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        study = tune.open_study(spec, "k", store)
    notices = [str(w.message) for w in caught if issubclass(w.category, tune.AbandonedTrials)]
    assert notices and all(f"{n}" in notices[0] for n in left), notices
    states = {t.number: t.state for t in study.get_trials()}
    assert all(states[n] == TrialState.FAIL for n in left)
    assert not [n for n, s in states.items() if s == TrialState.RUNNING]


def test_a_running_trial_of_a_live_process_is_left_alone(tmp_path):
    """A parallel run's other workers share the storage: their trials are not abandoned."""
    storage = f"journal:{tmp_path / 's.journal'}"
    spec = _spec("sglang")
    study = tune.open_study(spec, "live", storage)
    trial = study.ask()
    mark_process(trial)  # this process: alive
    assert tune.fail_abandoned_trials(study) == []
    assert study.get_trials()[trial.number].state == TrialState.RUNNING


def test_the_command_line_says_which_trials_it_failed(tmp_path):
    storage = f"journal:{tmp_path / 's.journal'}"
    args = ["tune", "--workload", "cpu-tiny", "--seeds", "1", "--steps", "1", "--storage", storage,
            "--study", "k", "--out", str(tmp_path / "t.yaml")]
    runner = CliRunner()
    res = runner.invoke(app, [*args, "--trials", "2"])
    assert res.exit_code == 0, res.output
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # a process that ended
    study = optuna.load_study(study_name="k", storage=tune.make_storage(storage))
    trial = study.ask()
    trial.set_user_attr(PROCESS, {"host": os.uname().nodename, "pid": int(gone.stdout),
                                  "started": None})
    res = runner.invoke(app, [*args, "--trials", "3"])
    assert res.exit_code == 0, res.output
    assert (f"notice: study 'k': trial(s) {trial.number} were left running by a process that is "
            "gone") in res.output, res.output


def test_a_killed_process_leaves_the_journal_unlocked(tmp_path):
    """The journal's lock is the kernel's: held while its process lives, free the moment it is
    killed (Optuna's lock files outlive a kill -9 and stall the next process for 30 s)."""
    import fcntl

    journal = tmp_path / "s.journal"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from workbench.tune.storage import KernelLock; "
         f"KernelLock({str(journal)!r}).acquire(); print('held', flush=True); time.sleep(600)"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"

        def free() -> bool:
            fd = os.open(f"{journal}.flock", os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False
            finally:
                os.close(fd)

        assert not free()
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        assert free()
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.stdout.close()
