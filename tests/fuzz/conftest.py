"""Any bytes in, a clear answer out: every reader a user can reach, fuzzed (the machinery; the
properties are test_readers.py, test_length_readers.py and test_cli.py).

Each reader (READERS) is given a valid input (one file, or a directory of files as a run publishes
them) with one file mutated: random bytes, the file cut at a line or a byte, re-encoded (UTF-16,
Latin-1, a byte-order mark, CRLF), a number replaced by a huge, negative, NaN or infinite value or
by another type, a line dropped or repeated, a JSON/YAML node or a Parquet cell replaced, bytes
overwritten, the file emptied, another reader's file in its place, or a wrong suffix. The reader
must return a result or raise a clear error (ConfigError, TraceError, TaskError) whose message
names the file, never another exception, nor a library's own words. A sample goes through the
command line too: exit 0 or 2, no traceback, and on exit 2 nothing written.

`make test` runs 200 inputs per reader and a tenth of that through the command line (each test
module's EXAMPLES, from TLT_FUZZ_EXAMPLES);
`TLT_FUZZ_EXAMPLES=10000 pytest tests/fuzz` is the long run (docs/results.md). Seeded
(derandomized): a run's inputs are the same on any machine.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pytest
import yaml
from hypothesis import event
from hypothesis import strategies as st
from typer.testing import CliRunner

from real.profiler.table import read_measurements
from workbench.calibrate.gpu_check.check_file import engine_measurements, gpu_key, load_check
from workbench.calibrate.captures.run_dir import load_run
from workbench.cli import app
from workbench.contracts.architecture import PRESET_DIR as ARCH_DIR
from workbench.contracts.architecture import load_architecture
from workbench.contracts.length_data import read_observed
from workbench.contracts.policy import Policy, load_policy
from workbench.contracts.profile import PRESET_DIR as PROFILE_DIR
from workbench.contracts.profile import Profile, load_profile
from workbench.contracts.schema import ConfigError, to_mapping
from workbench.contracts.task import TaskError, load_task
from workbench.contracts.trace import TIMELINE_COLUMNS, TraceError, load_trace
from workbench.contracts.workload import PRESET_DIR as WORKLOAD_DIR
from workbench.contracts.workload import Workload, load_workload
from workbench.runlog import calibrate as runlog_calibrate
from workbench.runlog.prepared import prepare as runlog_prepare
from workbench.runlog.lengths import model_lengths, step_stats
from workbench.runlog.reader import read_run_log
from workbench.runlog.shape import ShapeFlags, run_shape
from workbench.runlog.run_workload import run_workloads
from workbench.ui.inputs import parse_upload
from workbench.ui.length_upload import import_upload
from workbench.workloads.build import MODES, UNPLACED, import_workload

ROOT = Path(__file__).resolve().parents[2]
CLEAR = (ConfigError, TraceError, TaskError)
# A library's own words in a message: the reader let its error through unexplained.
# `make test`'s size: a few hundred inputs per reader (the long run, TLT_FUZZ_EXAMPLES >= 1000, also
# sends the inputs the trace, run and GPU-check readers accept through their commands).
SAMPLE = int(os.environ.get("TLT_FUZZ_EXAMPLES", "200")) < 1000
LIBRARY_WORDS = ("codec can't decode", "magic bytes", "Traceback", "object has no attribute",
                 "unhashable type", "not supported between instances", "invalid literal for",
                 "could not convert string to float", "NoneType", "list index out of range")
WEIRD = ("-1", "0", "-0", "1e308", "1e999", "-1e999", "NaN", "nan", "inf", "-inf", "Infinity",
         "99999999999999999999999999", "1.5", "2.0e7", "", "null", '"x"', "true", "[]", "{}",
         "-99999999999")
NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
# Which readers each test module fuzzes (its READERS name): the two whose every valid input runs
# the length fit are a module of their own, so that two pytest workers share the time.
LENGTH_READERS = ("length-file", "length-directory")


# ---- valid inputs ------------------------------------------------------------------------------

def _run_log_text() -> bytes:
    """The shipped GRPO log's launch command and first four steps."""
    with gzip.open(ROOT / "traces/published/verl-runs/grpo_run_deepseek7b_llm.log.gz", "rt") as f:
        lines = [line for _, line in zip(range(56), f)]
    return "".join(lines).encode()


def _lengths_frame() -> pd.DataFrame:
    return pd.DataFrame([{"step": s, "prompt": f"p{p}", "length": 20 + (97 * s + 31 * p + m) % 900,
                          "correct": (p + m) % 3 == 0, "rank": p % 2}
                         for s in range(3) for p in range(4) for m in range(4)])


def _parquet(frame: pd.DataFrame) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        frame.to_parquet(Path(d) / "f.parquet", index=False)
        return (Path(d) / "f.parquet").read_bytes()


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _polytrace(step: int) -> list[dict]:
    return [{"step": step, "rank": 4 * dp, "dp_rank": dp, "tp_rank": 0, "local_index": i,
             "input": 40 + i, "output": [30 + 7 * i + 50 * m + step for m in range(4)],
             "n_sampling": 4, "validate": False} for dp in range(2) for i in range(2)]


def _run_metrics() -> pd.DataFrame:
    with tempfile.TemporaryDirectory(prefix="tlt-fuzz-") as d:
        (Path(d) / "run.log").write_bytes(_run_log_text())
        return read_run_log(Path(d) / "run.log").metrics.drop(columns=["line"])


def _trace_files() -> dict[str, bytes]:
    src = ROOT / "traces/reference/fit-none"
    return {f.name: f.read_bytes() for f in sorted(src.iterdir())}


def _run_dir_files() -> dict[str, bytes]:
    files = {f"trace/{k}": v for k, v in _trace_files().items()}
    timeline = pd.DataFrame([{"rl_step": 0, "worker": 0, "start_s": 0.0, "end_s": 1.5,
                              "state": "decode", "batch": 4, "draft_len": 0, "tokens": 0.0,
                              "passes": 3.0, "context": 0.0, "strategy": ""}],
                            columns=list(TIMELINE_COLUMNS))
    files["trace/timeline.parquet"] = _parquet(timeline)
    files["metrics.csv"] = (b"rl_step,step_s,rollout_s,train_s,sync_s,drafter_steps\n"
                            b"0,2.5,1.5,0.6,0.2,0\n1,2.4,1.4,0.6,0.2,0\n")
    return files


def _task_rows() -> list[dict]:
    return [{"prompt": f"gcd({a}, {b}) =", "answer": str(__import__("math").gcd(a, b)),
             "solution": f"The gcd is {__import__('math').gcd(a, b)}."}
            for a, b in ((12, 18), (7, 21), (9, 6))]


def _replay_workload() -> dict[str, bytes]:
    wl = yaml.safe_load((WORKLOAD_DIR / "polytrace-dapo-qwen2.5-32b.yaml").read_text())
    wl["lengths"]["data"] = "w.lengths.parquet"
    return {"w.yaml": yaml.safe_dump(wl).encode(),
            "w.lengths.parquet": (WORKLOAD_DIR / "polytrace-dapo-qwen2.5-32b.lengths.parquet"
                                  ).read_bytes()}


# ---- the readers -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reader:
    """One reader: its valid inputs (file name -> bytes; a directory's files when `directory`),
    the files to fuzz, and how it is called (on the fuzzed file, or on the directory)."""

    name: str
    inputs: Callable[[], list[dict[str, bytes]]]
    read: Callable[[Path], Any]
    directory: bool = False
    cli: Callable[[Path, Path], list[str]] | None = None  # (input, out dir) -> tlt arguments
    # A valid input would start long work (engines, a fit, a comparison of seconds): in the sample
    # `make test` runs, the command sees only the inputs the reader refuses.
    cli_on_refusal_only: bool = False


class Upload:
    """What Streamlit's file_uploader hands the app: a name and the bytes."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name, self._data = name, data

    def getvalue(self) -> bytes:
        return self._data


def _read_workload(path: Path) -> Any:
    wl = load_workload(path)
    return read_observed(wl.lengths.data) if wl.lengths.data else wl


def _read_length_upload(path: Path) -> Any:
    with tempfile.TemporaryDirectory() as d:
        mode = MODES[len(path.read_bytes()) % len(MODES)]
        return import_upload([(path.name, path.read_bytes())], UNPLACED, mode, None, Path(d) / "u")


def _read_length_dir(path: Path) -> Any:
    with tempfile.TemporaryDirectory() as d:
        return import_workload([path], Path(d) / "w.yaml", load_workload("cpu-tiny"))


def _read_run_log(path: Path) -> Any:
    """What `tlt calibrate --run-log` and What-if's Run log do: half the inputs with the log's own
    shape up to the first simulation (its 1024 prompts x 5 would take seconds), half with a small
    shape given as flags (as the page's boxes give it) through the simulation of every step, the
    fit and the calibrated run as a workload."""
    if len(path.read_bytes()) % 2 == 0:
        log = read_run_log(path)
        shape = run_shape(log, ShapeFlags(gpu="h100"))
        stats = step_stats(log)
        return model_lengths(stats, shape.responses, shape.max_response_tokens, 0, 64, None)
    flags = ShapeFlags(gpu="h100", gpus=1, tp=1, prompts_per_step=4, group_size=2,
                       max_response_tokens=512, max_batch=8)
    prepared = runlog_prepare(path, flags)
    if prepared.log.steps < 2:
        return prepared
    result = runlog_calibrate.calibrate(prepared, 1, "fuzzed")
    return run_workloads(result, "run", "calibrated.yaml")


def _read_gpu_check(path: Path) -> Any:
    check = load_check(path)
    return gpu_key(check.machine), engine_measurements(check)


def _read_architecture(path: Path) -> Any:
    a = load_architecture(path)
    return a.params, a.kv_bytes_per_token(), a.drafter_params


def _read_upload(path: Path) -> Any:
    cls = (Workload, Policy, Profile)[len(path.read_bytes()) % 3]
    return parse_upload(cls, Upload(path.name, path.read_bytes()))


def _yaml_inputs(*paths: Path) -> Callable[[], list[dict[str, bytes]]]:
    return lambda: [{p.name: p.read_bytes()} for p in paths]


def _policy_inputs() -> list[dict[str, bytes]]:
    tlt = ROOT / "workbench/contracts/presets/policies/tlt.yaml"
    return [{"tlt.yaml": tlt.read_bytes()},
            {"tlt.json": json.dumps(to_mapping(load_policy("tlt")), indent=1).encode()}]


def _length_inputs() -> list[dict[str, bytes]]:
    df = _lengths_frame()
    summary = pd.DataFrame({"step": [1, 2, 3], "response_length/mean": [300.0, 320.0, 350.0],
                            "response_length/max": [2000.0, 2100.0, 2048.0],
                            "response_length/clip_ratio": [0.0, 0.0, 0.01]})
    return [{"lengths.csv": df.to_csv(index=False).encode()},
            {"lengths.jsonl": _jsonl(df.to_dict("records"))},
            {"lengths.parquet": _parquet(df)},
            {"packed_lengths_step_0.jsonl": _jsonl(_polytrace(0))},
            {"metrics.csv": summary.to_csv(index=False).encode()}]


def _length_dir_inputs() -> list[dict[str, bytes]]:
    dapo = [{"workload_step": s, "trainer_step": s + 1, "prompt_count": 4, "n_sampling": 4,
             "train_batch_size": 2, "kept_prompt_indices": [0, 3]} for s in range(2)]
    rewards = [{"step": s, "rank": r, "reward_time_s": 3.0 + s + r, "validate": False}
               for s in range(2) for r in (0, 4)]
    return [{"packed_lengths_step_0.jsonl": _jsonl(_polytrace(0)),
             "packed_lengths_step_1.jsonl": _jsonl(_polytrace(1)),
             "dapo_filter_indices.jsonl": _jsonl(dapo),
             "reward_timings_step_0.jsonl": _jsonl(rewards)}]


FRAMEWORK_LOGS = ROOT / "traces/published/framework-logs"


def _framework_inputs() -> list[dict[str, bytes]]:
    """Each other framework's console log (written from its logging code: the folder's README),
    its first steps, and one tracker export (a W&B history of slime's perf and rollout records)."""
    out = []
    for f in sorted(FRAMEWORK_LOGS.glob("*.log")):
        lines = f.read_bytes().splitlines(keepends=True)
        out.append({f.name: b"".join(lines[:160])})
    text = (FRAMEWORK_LOGS / "slime-qwen2.5-7b.log").read_text()
    rows = [{**{k: v for k, v in re.findall(r"'([^']+)': (?:np\.float64\()?([-\d.e]+)", m[1])},
             "rollout/step": int(m[0])}
            for m in re.findall(r" (?:perf|rollout) (\d+): (\{.*)", text)]
    out.append({"history.csv": pd.DataFrame(rows).to_csv(index=False).encode()})
    return out


def _run_log_inputs() -> list[dict[str, bytes]]:
    m = _run_metrics()
    text = _run_log_text()
    return [{"run.log": text}, {"run.log.gz": gzip.compress(text, mtime=0)},
            {"metrics.csv": m.to_csv(index=False).encode()},
            {"metrics.csv.gz": gzip.compress(m.to_csv(index=False).encode(), mtime=0)},
            {"metrics.jsonl": _jsonl(m.to_dict("records"))}, {"metrics.parquet": _parquet(m)},
            *_framework_inputs()]


def _task_inputs() -> list[dict[str, bytes]]:
    return [{"task.jsonl": _jsonl(_task_rows())}, {"task.parquet": _parquet(pd.DataFrame(
        _task_rows()))}]


def _out(name: str) -> Callable[[Path, Path], list[str]]:
    return lambda p, out: [*name.split(), str(p)]


READERS = (
    Reader("policy", _policy_inputs, load_policy, cli=_out("check policy")),
    Reader("workload", lambda: [{"cpu-tiny.yaml": (WORKLOAD_DIR / "cpu-tiny.yaml").read_bytes()},
                                _replay_workload()], _read_workload,
           cli=lambda p, out: ["workload", "show", str(p)]),
    Reader("profile", _yaml_inputs(PROFILE_DIR / "cpu-tiny.yaml",
                                   PROFILE_DIR / "h100-qwen2.5-7b-tp1-sglang.yaml"),
           load_profile, cli=_out("check profile")),
    Reader("length-file", _length_inputs, _read_length_upload,
           cli=lambda p, out: ["workload", "import", str(p), "--base", "cpu-tiny", "--out",
                               str(out / "w.yaml")]),
    Reader("length-directory", _length_dir_inputs, _read_length_dir, directory=True,
           cli=lambda p, out: ["workload", "import", str(p), "--base", "cpu-tiny", "--cap",
                               "4096", "--out", str(out / "w.yaml")]),
    Reader("run-log", _run_log_inputs, _read_run_log,
           cli=lambda p, out: ["calibrate", "--run-log", str(p), "--fit-steps", "2", "--gpu",
                               "h100", "--arch", "qwen2.5-7b", "--gpus", "1", "--tp", "1",
                               "--prompts-per-step", "4", "--group-size", "2",
                               "--max-response-tokens", "512", "--max-batch", "8", "--out",
                               str(out / "p.yaml")]),
    Reader("trace", lambda: [_trace_files()], load_trace, directory=True,
           cli=lambda p, out: ["calibrate", str(p), "--out", str(out / "p.yaml")],
           cli_on_refusal_only=SAMPLE),
    Reader("run-directory", lambda: [_run_dir_files()], load_run, directory=True,
           cli=lambda p, out: ["validate", str(p), "--profile", "cpu-tiny", "--out",
                               str(out / "v")], cli_on_refusal_only=SAMPLE),
    Reader("task", _task_inputs, lambda p: load_task(p, "exact"),
           cli=lambda p, out: ["train", "--model", str(out / "no-model"), "--policy", "baseline",
                               "--task", str(p), "--out", str(out / "run")],
           cli_on_refusal_only=True),
    Reader("gpu-check", _yaml_inputs(ROOT / "traces/measured/gpu-check-cpu-2026-11-26.json"),
           _read_gpu_check, cli=lambda p, out: ["gpu-check", "--measured", str(p)],
           cli_on_refusal_only=SAMPLE),
    Reader("architecture", _yaml_inputs(ARCH_DIR / "qwen2.5-7b.json"), _read_architecture,
           cli=lambda p, out: ["profile", "--backend", "aiconfigurator", "--arch", str(p),
                               "--gpu", "h100", "--tp", "1", "--framework", "vllm", "--out",
                               str(out / "p.yaml")], cli_on_refusal_only=True),
    Reader("profiler-measurements",
           _yaml_inputs(PROFILE_DIR / "cpu-tiny-operators.measurements.parquet"),
           read_measurements,
           cli=lambda p, out: ["profile", "--measurements", str(p), "--out", str(out / "p.yaml")]),
    Reader("app-upload", lambda: [*_policy_inputs(),
                                  {"w.yaml": (WORKLOAD_DIR / "cpu-tiny.yaml").read_bytes()},
                                  {"p.yaml": (PROFILE_DIR / "cpu-tiny.yaml").read_bytes()}],
           _read_upload),
)


# ---- the mutations -----------------------------------------------------------------------------

MISSING = b"<missing>"


class Case:
    """One fuzzed input: the reader's files with `target` replaced by `data` (renamed `name`).
    (A plain class: hypothesis prints a dataclass field by field, every file's bytes.)"""

    def __init__(self, files: dict[str, bytes], target: str, data: bytes, name: str,
                 how: str) -> None:
        self.files, self.target, self.data, self.name, self.how = files, target, data, name, how

    def __repr__(self) -> str:
        return (f"Case({self.how}: {self.target} -> {self.name}, {len(self.data)} bytes "
                f"{self.data[:120]!r}{'...' if len(self.data) > 120 else ''})")

    def write(self, root: Path) -> Path:
        """The files under `root`; the path the reader is given (the fuzzed file, or `root`)."""
        for rel, data in self.files.items():
            if rel != self.target:
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(data)
        (root / self.name).parent.mkdir(parents=True, exist_ok=True)
        if self.data is not MISSING:  # a directory's file left out
            (root / self.name).write_bytes(self.data)
        return root / self.name


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True) or [b""]


def _json_values() -> st.SearchStrategy:
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                     st.sampled_from([0, -1, 1e308, -1e-300, 2**63, "", "nan", "1e999"]))
    return st.recursive(leaf, lambda kids: st.lists(kids, min_size=1, max_size=3)
                        | st.dictionaries(st.text(max_size=8), kids, min_size=1, max_size=3),
                        max_leaves=6)


def _paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += _paths(v, prefix + (i,))
    return out


def _replace(tree: Any, path: tuple, value: Any, drop: bool) -> Any:
    if not path:
        return value
    parent = tree
    for k in path[:-1]:
        parent = parent[k]
    if drop:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return tree


@st.composite
def _structured(draw, data: bytes, suffix: str) -> bytes:
    """A JSON/YAML document (or one JSONL line) with one node replaced by any JSON value, or
    dropped."""
    text = data.decode()
    if suffix == ".jsonl":
        lines = text.splitlines()
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        if not lines:
            return data
        lines[i] = draw(_structured(lines[i].encode(), ".json")).decode().replace("\n", " ")
        return ("\n".join(lines) + "\n").encode()
    tree = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    path = draw(st.sampled_from(_paths(tree)))
    tree = _replace(tree, path, draw(_json_values()), bool(path) and draw(st.booleans()))
    if suffix == ".json":
        return json.dumps(tree).encode()
    return yaml.safe_dump(tree, allow_unicode=True).encode()


@st.composite
def _frame_cell(draw, data: bytes) -> bytes:
    """A Parquet table with one cell, column or dtype changed."""
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "f.parquet").write_bytes(data)
        df = pd.read_parquet(Path(d) / "f.parquet")
    how = draw(st.sampled_from(["cell", "drop", "text", "empty"]))
    if not len(df.columns):
        return data
    col = draw(st.sampled_from(list(df.columns)))
    if how == "drop":
        df = df.drop(columns=[col])
    elif how == "text":
        df[col] = df[col].astype(str)
    elif how == "empty":
        df = df.iloc[:0]
    elif len(df):
        df[col] = df[col].astype(object)
        value = draw(st.sampled_from([None, float("nan"), float("inf"), -1, -1e300, 1e300, 2**62,
                                      "x", "", True]))
        df.iat[draw(st.integers(0, len(df) - 1)), df.columns.get_loc(col)] = value
    try:
        return _parquet(df)
    except Exception:  # a mix pyarrow cannot write: keep the file as it was
        return data


def _reencoded(data: bytes, codec: str) -> bytes:
    text = data.decode(errors="replace")
    if codec in ("latin-1", "cp1252"):
        text = "# café\n" + text if data.lstrip().startswith((b"{", b"[")) is False else text
        text = text.replace("e", "é", 1)
    if codec == "crlf":
        return text.replace("\n", "\r\n").encode()
    return text.encode(codec, errors="replace")


@st.composite
def _mutated(draw, data: bytes, suffix: str) -> tuple[bytes, str]:
    binary = suffix in (".parquet", ".gz")
    kinds = ["random", "empty", "cut_bytes", "flip", "other"]
    if not binary:
        kinds += ["cut_line", "number", "number", "encode", "drop_line", "repeat_line",
                  "structure", "structure", "delimiter"]
    if suffix == ".parquet":
        kinds += ["frame", "frame", "frame"]
    kind = draw(st.sampled_from(kinds))
    if kind == "random":
        return draw(st.binary(max_size=3000)), kind
    if kind == "empty":
        return b"", kind
    if kind == "cut_bytes":
        return data[:draw(st.integers(0, max(0, len(data) - 1)))], kind
    if kind == "flip":
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 8))):
            if out:
                out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
        return bytes(out), kind
    if kind == "other":
        return draw(st.sampled_from(_all_samples())), kind
    lines = _lines(data)
    if kind == "cut_line":
        k = draw(st.integers(0, len(lines)))
        partial = lines[k][:draw(st.integers(0, len(lines[k])))] if k < len(lines) else b""
        return b"".join(lines[:k]) + (partial if draw(st.booleans()) else b""), kind
    if kind in ("drop_line", "repeat_line"):
        i = draw(st.integers(0, len(lines) - 1))
        return b"".join(lines[:i] + ([lines[i]] * 2 if kind == "repeat_line" else [])
                        + lines[i + 1:]), kind
    if kind == "number":
        spans = [m.span() for m in NUMBER.finditer(data)]
        if not spans:
            return data, kind
        a, b = draw(st.sampled_from(spans))
        return data[:a] + draw(st.sampled_from(WEIRD)).encode() + data[b:], kind
    if kind == "delimiter":
        return data.replace(b",", draw(st.sampled_from([b";", b"\t", b"|", b", "]))), kind
    if kind == "encode":
        codec = draw(st.sampled_from(["utf-16", "utf-16-le", "utf-16-be", "latin-1", "cp1252",
                                      "utf-8-sig", "crlf"]))
        return _reencoded(data, codec), f"{kind}:{codec}"
    if kind == "structure" and suffix in (".json", ".yaml", ".yml", ".jsonl"):
        try:
            return draw(_structured(data, suffix)), kind
        except (ValueError, yaml.YAMLError):
            return data, kind
    if kind == "frame":
        return draw(_frame_cell(data)), kind
    return data, kind


_SAMPLES: list[bytes] = []


def _all_samples() -> list[bytes]:
    """Every reader's valid files (another reader's file given in this one's place)."""
    if not _SAMPLES:
        _SAMPLES.extend(v for r in READERS for inp in r.inputs() for v in inp.values())
    return _SAMPLES


_INPUTS: dict[str, list[dict[str, bytes]]] = {}


@st.composite
def cases(draw, reader: Reader) -> Case:
    if reader.name not in _INPUTS:
        _INPUTS[reader.name] = reader.inputs()
    files = draw(st.sampled_from(_INPUTS[reader.name]))
    target = draw(st.sampled_from(sorted(files)))
    suffix = "".join(Path(target).suffixes[-1:])
    data, how = draw(_mutated(files[target], suffix))
    if how != "other" and suffix not in (".parquet", ".gz") and draw(st.integers(0, 3)) == 0:
        data, again = draw(_mutated(data, suffix))  # a second mutation on the first
        how += f" + {again}"
    if reader.directory and draw(st.integers(0, 19)) == 0:
        data, how = MISSING, "missing"
    name = target
    if not reader.directory and draw(st.integers(0, 9)) == 0:  # a wrong suffix, or none
        stem = target.split(".")[0]
        name = stem + draw(st.sampled_from([".csv", ".jsonl", ".parquet", ".log", ".json",
                                            ".yaml", ".txt", ".gz", ""]))
        how += f", named {name}"
    return Case(files, target, data, name, how)


# ---- the properties ----------------------------------------------------------------------------

def _clear(exc: Exception, case: Case, root: Path) -> None:
    """A clear error: it names the file (or the directory) and holds no library's own words."""
    msg = str(exc)
    named = Path(case.name).name in msg or str(root) in msg
    assert named, f"{case.how}: the error does not name the file: {msg}"
    words = [w for w in LIBRARY_WORDS if w in msg]
    assert not words, f"{case.how}: the error speaks the library's words {words}: {msg}"


def read_case(reader: Reader, case: Case, root: Path) -> Exception | None:
    """Run the reader on `case` written under `root`; the clear error it raised (None: a
    result). Any other exception propagates, with its traceback."""
    path = case.write(root)
    try:
        reader.read(root if reader.directory else path)
    except CLEAR as exc:
        _clear(exc, case, root)
        return exc
    return None


BY_NAME = {r.name: r for r in READERS}
GROUPS = {
    "lengths": list(LENGTH_READERS),
    "others": [n for n in BY_NAME if n not in LENGTH_READERS],
    "cli": [r.name for r in READERS if r.cli is not None],
}


def pytest_generate_tests(metafunc) -> None:
    """A test taking `reader` runs once per reader of its module's group (module READERS)."""
    if "reader" in metafunc.fixturenames:
        names = GROUPS[metafunc.module.READERS]
        metafunc.parametrize("reader", [BY_NAME[n] for n in names], ids=names)


class Fuzz:
    """What the test modules use (tests never import each other: a fixture hands it over)."""

    @staticmethod
    def cases(reader: Reader) -> st.SearchStrategy:
        return cases(reader)

    @staticmethod
    def read(reader: Reader, case: Case) -> None:
        """The reader on `case`: a result or a clear error (read_case)."""
        with tempfile.TemporaryDirectory(prefix="tlt-fuzz-") as d:
            refused = read_case(reader, case, Path(d) / "in")
        event("refused, clearly" if refused is not None else "read")  # --hypothesis-show-statistics

    @staticmethod
    def command_line(reader: Reader, case: Case) -> None:
        """The reader's command on `case`: exit 0 or 2, no traceback; on 2, nothing written."""
        with tempfile.TemporaryDirectory(prefix="tlt-fuzz-") as d:
            root, out = Path(d) / "in", Path(d) / "out"
            refused = read_case(reader, case, root)
            if refused is None and reader.cli_on_refusal_only:
                return
            path = root if reader.directory else root / case.name
            res = CliRunner().invoke(app, reader.cli(path, out))
            if res.exception is not None and not isinstance(res.exception, SystemExit):
                raise res.exception
            assert res.exit_code in (0, 2), (
                f"{case.how}: exit {res.exit_code}: {res.output[-800:]}")
            if res.exit_code == 2:
                assert "error:" in res.output, res.output
                left = sorted(out.rglob("*")) if out.exists() else []
                assert not left, f"{case.how}: exit 2 left {left}"


@pytest.fixture(scope="session")
def fuzz() -> Fuzz:
    return Fuzz()
