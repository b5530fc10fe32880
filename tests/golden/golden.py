"""The golden comparison: every CLI output and result file, byte for byte, against a reference tree:
a refactor changes no output, and a feature changes only the outputs it declares.

Run it from the repository root, with this checkout first on the path:

    PYTHONPATH=$PWD python tests/golden/golden.py            # compare with manifest.json (~2 min)
    PYTHONPATH=$PWD python tests/golden/golden.py --diff     # and show what differs, line by line
    PYTHONPATH=$PWD python tests/golden/golden.py --record   # rebuild manifest.json (see below)

It runs the `tlt` commands in COMMANDS (fixed seeds, trial counts instead of time budgets) in one
process, one output folder each, and reduces every output to a canonical form: stdout and stderr
and tlt plan's JSON with their wall-clock seconds masked (WALL_CLOCK), Parquet as CSV with its
dtypes, the checkout's and the output folder's absolute paths as <ROOT> and <OUT>, everything else
as written. Each file's sha256 is compared with manifest.json; exit 0 when all match, 1 otherwise.

manifest.json is never taken from the tree under test: `--record` exports the commit it names
(`--commit`, default the manifest's own, BASE_COMMIT when there is none) with
`git archive`, runs the commands there twice (the two runs must agree: nothing unmasked depends
on the clock), and digests their outputs after the declared changes
(DECLARED): the few output differences intended since (a module's new path), each with its
reason. `--diff` rebuilds that reference the same way and prints a unified diff of each text file
that differs. `--keep DIR` keeps this tree's canonical outputs in DIR.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MANIFEST = HERE / "manifest.json"
BASE_COMMIT = "d246da2"  # main with issues 48-52 merged

TEXT = {".txt", ".json", ".yaml", ".yml", ".md", ".csv", ".log", ".sh", ".jsonl"}

# Wall-clock seconds in stdout and stderr (progress and "done in" lines), masked as <wall>; the
# simulated seconds beside them stay. Of the result files, only tlt plan's holds any (the search's
# and each shape's evaluation time).
WALL_CLOCK = [re.compile(p, re.MULTILINE) for p in (
    r"[(,] ?(\d+(?:\.\d+)?)s\)",  # progress: "[3/8] tlt seed 0  (0.3s)", "trial 2/4 (#1, 0.1s)"
    r"  (\d+\.\d+)s$",  # tlt plan's shape lines
    r"\b(?:in|after) (\d+(?:\.\d+)?)s\b",  # "simulated tlt in 0.04s", "searched in 10.8s"
)]
WALL_CLOCK_FILES = {"plan/plan.json": re.compile(r'"(?:search_)?seconds": ([-+.e0-9]+)')}


@dataclass(frozen=True)
class Command:
    name: str  # the output folder
    # `tlt` arguments; {out}: this command's folder, {outs}: all outputs, {work}: fixtures
    args: str


@dataclass(frozen=True)
class Declared:
    """An intended output difference: in files matching `glob`, `old` becomes `new` (`old` empty:
    `new` is prepended)."""
    glob: str
    old: str
    new: str
    why: str


# Intended output differences since the reference commit. One per change, with why.
DECLARED: list[Declared] = []

PRESET_POLICIES = (
    "april",
    "async-1",
    "async-4",
    "baseline",
    "history-sd",
    "rollpacker",
    "static-sd",
    "tlt",
    "tlt-async-1",
    "tlt-base",
    "tlt-cold",
    "tlt-partial",
    "tlt-vllm",
    "verl-fully-async",
)
GRPO_LOG = "traces/published/verl-runs/grpo_run_deepseek7b_llm.log.gz"
PPO_LOG = "traces/published/verl-runs/ppo_run_deepseek7b_llm.log.gz"
FIT = "traces/reference/fit-none traces/reference/fit-ngram traces/reference/fit-eagle"
HELDOUT = (
    "traces/reference/heldout-none traces/reference/heldout-ngram traces/reference/heldout-eagle"
)

# Every command's --help: its options, defaults and wording.
HELP = (
    "",
    "sim",
    "presets",
    "check",
    "compare",
    "regret",
    "tune",
    "calibrate",
    "validate",
    "profile",
    "gpu-check",
    "gpu-presets",
    "sd-curve",
    "capture",
    "train",
    "paper",
    "export",
    "project",
    "plan",
    "bench",
    "bench sim",
    "bench rollout",
    "bench grpo",
    "bench real",
    "bench sweep",
    "model init",
    "drafter train",
    "workload import",
    "workload show",
    "task gcd",
)

COMMANDS: list[Command] = (
    [Command("help-" + (h.replace(" ", "-") or "tlt"), f"{h} --help") for h in HELP]
    + [
        Command("presets", "presets --long"),
        Command("check-policy-tlt", "check policy tlt"),
        Command("check-policy-ngram-sd", "check policy traces/reference/policies/ngram-sd.yaml"),
        Command("check-workload", "check workload polytrace-dapo-qwen2.5-32b"),
        Command("check-profile", "check profile cpu-tiny"),
        # The simulator: every rollout mode and drafter kind on the shipped presets.
        Command(
            "sim-fastrl-7b",
            "sim --workload paper-7b-8gpu "
            "--policy baseline,static-sd,tlt,tlt-base,tlt-cold,history-sd --out {out}",
        ),
        Command(
            "sim-async",
            "sim --workload peer-async-7b-128gpu "
            "--policy baseline,async-1,async-4,tlt-async-1,verl-fully-async "
            "--steps 3 --seed 1 --out {out}",
        ),
        Command(
            "sim-partial",
            "sim --workload peer-april-7b-8gpu --policy baseline,april,tlt-partial "
            "--steps 3 --out {out}",
        ),
        Command(
            "sim-tail-batching",
            "sim --workload peer-rollpacker-32b-128gpu --policy baseline,rollpacker "
            "--steps 3 --out {out}",
        ),
        Command(
            "sim-suffix",
            "sim --workload peer-spec-rl-7b-8gpu --policy baseline,history-sd --steps 3 "
            "--seed 2 --out {out}",
        ),
        Command(
            "sim-dynamic-sampling",
            "sim --workload polytrace-dapo-qwen2.5-32b --policy baseline,tlt --steps 2 --out {out}",
        ),
        Command(
            "sim-cpu-tiny",
            "sim --workload cpu-tiny "
            "--policy baseline,tlt-vllm,traces/reference/policies/ngram-sd.yaml --out {out}",
        ),
        Command(
            "sim-cluster",
            "sim --workload tlt-eval-qwen2.5-32b --policy baseline,tlt "
            "--profile cluster:qwen2.5-32b:b200:sglang --steps 2 --out {out}",
        ),
        Command(
            "sim-legacy-policy",
            "sim --workload fastrl-example-7b-8gpu "
            "--policy baseline,{work}/legacy-tlt.yaml --steps 2 --out {out}",
        ),
        # The tools over the simulator.
        Command(
            "compare",
            "compare --workload fastrl-example-7b-8gpu --policies baseline,tlt,april,rollpacker "
            "--seeds 2 --out {out}",
        ),
        Command(
            "regret",
            "regret --workload fastrl-example-7b-8gpu --policy tlt-cold --seeds 2 --out {out}",
        ),
        Command(
            "project",
            "project --workload tlt-eval-qwen2.5-32b --policies baseline,tlt --steps 200 "
            "--seeds 1 --price-per-gpu-hour 2.5 --out {out}",
        ),
        Command(
            "plan",
            "plan --workload tlt-eval-qwen2.5-32b --gpu h100 --gpus 64 --price-per-gpu-hour 2.5 "
            "--steps 200 --trials 6 --out {out}",
        ),
        Command(
            "tune",
            "tune --workload fastrl-example-7b-8gpu --trials 4 --seeds 1 --steps 2 "
            "--storage memory --out {out}/tuned.yaml",
        ),
        Command(
            "sd-curve-eagle", "sd-curve --arch qwen2.5-7b --gpu h100 --tp 1 --framework sglang"
        ),
        Command(
            "sd-curve-ngram",
            "sd-curve --profile cpu-tiny --drafter ngram --strategy chain:4 --no-check-policies",
        ),
        Command("paper", "paper --no-calibrate --out {out}"),
        Command("paper-peers", "paper --peers --seeds 1 --out {out}"),
        Command("gpu-check", "gpu-check"),
        Command(
            "gpu-check-measured",
            "gpu-check --measured traces/measured/gpu-check-h100-80gb-hbm3-2026-11-26.json",
        ),
        Command(
            "profile-aiconfigurator",
            "profile --backend aiconfigurator --arch qwen2.5-7b --gpu h100 --tp 1 "
            "--framework vllm --out {out}/profile.yaml",
        ),
        # Calibration and validation on the shipped traces and logs.
        Command(
            "calibrate-traces",
            f"calibrate {FIT} --out {{out}}/fit.yaml --lengths-out {{out}}/fit.workload.yaml",
        ),
        Command("validate-traces", f"validate --profile cpu-tiny {HELDOUT} --out {{out}}"),
        Command(
            "calibrate-runlog",
            "calibrate --run-log {work}/grpo.log --fit-steps 20 --gpu h100 "
            "--out {out}/grpo.yaml --workload-out {out}/grpo-run.yaml",
        ),
        Command(
            "validate-runlog",
            "validate --run-log {work}/ppo.log --group-size 1 "
            "--profile {outs}/calibrate-runlog/grpo.yaml --out {out}",
        ),
        Command("workload-show", "workload show polytrace-dapo-qwen2.5-32b"),
        Command(
            "workload-import",
            "workload import {work}/lengths.csv --mode fit --cap 4096 "
            "--base tlt-eval-qwen2.5-32b --out {out}/w.yaml",
        ),
    ]
    + [
        Command(
            f"export-{p}-{to}",
            f"export {p} --to {to} --drafter traces/reference/drafter --out {{out}}/{p}.{to}.{ext}",
        )
        for p in PRESET_POLICIES
        for to, ext in (("vllm", "yaml"), ("sglang", "sh"), ("verl", "yaml"))
    ]
)

# A policy file written before `training` became `spot_training`: it must still load.
LEGACY_POLICY = """\
name: legacy-tlt
sd_threshold: 32
schedule:
  - [1, 4, 4]
  - [5, 32, 2]
bandit:
  algorithm: beg
  arms: [0, 2, 4]
drafter:
  kind: eagle
  ngram_fallback: true
training:
  enabled: true
  min_idle_workers: 1
  steps: 500
"""


def write_fixtures(work: Path, tree: Path) -> None:
    """Inputs the commands share: the legacy policy, the first 60 steps of each veRL log (the whole
    logs take a minute each), and a small length table."""
    import gzip

    work.mkdir(parents=True, exist_ok=True)
    (work / "legacy-tlt.yaml").write_text(LEGACY_POLICY)
    for src, dst in ((GRPO_LOG, "grpo.log"), (PPO_LOG, "ppo.log")):
        keep = []
        with gzip.open(tree / src, "rt") as f:
            for line in f:
                if line.startswith("step:61 "):
                    break
                keep.append(line)
        (work / dst).write_text("".join(keep))
    rows = ["step,prompt,length,correct"]
    for step in range(3):
        for prompt in range(16):
            for rank in range(4):
                length = 64 + (step * 131 + prompt * 977 + rank * 389) % 3900
                rows.append(f"{step},{prompt},{length},{int((prompt + rank) % 3 == 0)}")
    (work / "lengths.csv").write_text("\n".join(rows) + "\n")


def run_commands(tree: Path, out: Path) -> None:
    """Run COMMANDS with `tree`'s code (in this process) into `out`."""
    sys.path.insert(0, str(tree))
    os.chdir(tree)
    # Wide, so no help line wraps where a default path is longer in one tree than in another.
    os.environ.update(COLUMNS="400", TERM="dumb", NO_COLOR="1")
    import matplotlib

    matplotlib.use("Agg")
    from typer.testing import CliRunner

    from workbench.cli import app

    assert Path(sys.modules["workbench"].__file__).resolve().is_relative_to(tree), (
        "imported another tree"
    )
    work = out / "_work"
    write_fixtures(work, tree)
    runner = CliRunner()
    for cmd in COMMANDS:
        folder = out / cmd.name
        folder.mkdir(parents=True)
        args = cmd.args.format(out=folder, outs=out, work=work).split()
        print(f"golden: tlt {' '.join(args)}", file=sys.__stderr__, flush=True)
        res = runner.invoke(app, args, prog_name="tlt")
        err = res.stderr
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            err += "".join(traceback.format_exception(res.exception))
        (folder / "stdout.txt").write_text(f"exit {res.exit_code}\n{res.stdout}")
        (folder / "stderr.txt").write_text(err)


def mask_wall_clock(text: str, patterns: list[re.Pattern]) -> str:
    """`text` with each pattern's first group (a number of seconds) replaced by <wall>."""
    for pattern in patterns:
        text = pattern.sub(lambda m: m.group(0).replace(m.group(1), "<wall>"), text)
    return text


def canonical(out: Path, tree: Path) -> dict[str, bytes]:
    """Every output file under `out` in its canonical form, by path relative to `out`."""
    import pandas as pd

    files = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file() and "_work" not in p.parts):
        rel = str(path.relative_to(out))
        if path.suffix == ".parquet":
            df = pd.read_parquet(path)
            dtypes = ",".join(f"{c}:{t}" for c, t in df.dtypes.items())
            files[rel + ".csv"] = (
                f"dtypes {dtypes}\n" + df.to_csv(index=False, lineterminator="\n")
            ).encode()
        elif path.suffix in TEXT:
            text = path.read_text().replace(str(out), "<OUT>").replace(str(tree), "<ROOT>")
            if path.name in ("stdout.txt", "stderr.txt"):
                text = mask_wall_clock(text, WALL_CLOCK)
            if rel.startswith("help-"):  # the padding of help boxes follows the paths' lengths
                text = re.sub(r" {2,}", " ", text)
            elif rel in WALL_CLOCK_FILES:
                text = mask_wall_clock(text, [WALL_CLOCK_FILES[rel]])
            files[rel] = text.encode()
        else:
            files[rel] = path.read_bytes()
    return files


def apply_declared(files: dict[str, bytes]) -> dict[str, bytes]:
    """The reference's outputs with the declared, intended differences applied."""
    done = dict(files)
    for d in DECLARED:
        hits = [rel for rel in done if fnmatch.fnmatch(rel, d.glob)]
        assert any(d.old in done[rel].decode() for rel in hits), (
            f"declared change matches no output: {d}"
        )
        for rel in hits:
            text = done[rel].decode()
            done[rel] = (d.new + text if not d.old else text.replace(d.old, d.new)).encode()
    return done


def outputs(tree: Path, keep: Path | None = None) -> dict[str, bytes]:
    """Run the commands on `tree` in a child process and return the canonical outputs."""
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        out = Path(tmp) / "out"
        env = dict(os.environ, PYTHONPATH=str(tree))
        subprocess.run(
            [sys.executable, __file__, "--run", str(out), "--tree", str(tree)], env=env, check=True
        )
        files = canonical(out, tree)
    if keep is not None:
        for rel, data in files.items():
            (keep / rel).parent.mkdir(parents=True, exist_ok=True)
            (keep / rel).write_bytes(data)
    return files


def reference(commit: str, keep: Path | None = None) -> dict[str, bytes]:
    """The canonical outputs of `commit`'s tree (exported with git archive), as it wrote them."""
    with tempfile.TemporaryDirectory(prefix="golden-ref-") as tmp:
        tar = subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as t:
            t.extractall(tmp, filter="data")
        return outputs(Path(tmp).resolve(), keep)


def read_folder(folder: Path) -> dict[str, bytes]:
    """Canonical outputs kept earlier (`--keep`)."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def digests(files: dict[str, bytes]) -> dict[str, str]:
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in sorted(files.items())}


def compare(files: dict[str, bytes], manifest: dict) -> list[str]:
    """The paths whose digest differs from the manifest's (missing and extra ones included)."""
    mine, want = digests(files), manifest["files"]
    return sorted(rel for rel in set(mine) | set(want) if mine.get(rel) != want.get(rel))


def show_diff(
    files: dict[str, bytes], ref: dict[str, bytes], bad: list[str], max_lines: int = 60
) -> None:
    for rel in bad:
        a, b = ref.get(rel), files.get(rel)
        if a is None or b is None:
            print(f"--- {rel}: {'only in this tree' if a is None else 'missing in this tree'}")
            continue
        if Path(rel).suffix not in TEXT:
            print(f"--- {rel}: binary, differs")
            continue
        lines = list(difflib.unified_diff(a.decode().splitlines(), b.decode().splitlines(),
                                          f"reference/{rel}", f"this tree/{rel}", lineterm="", n=1))
        more = [f"... {len(lines) - max_lines} more lines"] if len(lines) > max_lines else []
        print("\n".join(lines[:max_lines] + more))


def record(commit: str, ref_dir: Path | None, keep: Path | None) -> int:
    """manifest.json from `commit`'s outputs (run twice: they must agree) or from a kept folder."""
    if ref_dir is not None:
        raw = read_folder(ref_dir)
    else:
        raw = reference(commit, keep)
        unstable = compare(reference(commit), {"files": digests(raw)})
        if unstable:  # a wall-clock number WALL_CLOCK does not mask yet, or an unseeded choice
            print(
                "golden: two runs of the reference differ in:\n"
                + "\n".join(f"  {r}" for r in unstable)
            )
            return 1
    files = apply_declared(raw)
    MANIFEST.write_text(json.dumps({"commit": commit, "files": digests(files)}, indent=1) + "\n")
    print(
        f"golden: recorded {len(files)} outputs of {commit} ({len(DECLARED)} declared changes) "
        f"into {MANIFEST.relative_to(ROOT)}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--diff", action="store_true", help="on a difference, show it against the reference"
    )
    ap.add_argument(
        "--record", action="store_true", help="rewrite manifest.json from --commit's tree"
    )
    ap.add_argument("--commit", help="the reference commit for --record (default: the manifest's)")
    ap.add_argument("--keep", type=Path, help="keep the canonical outputs run here in this folder")
    ap.add_argument(
        "--ref",
        type=Path,
        help="the reference's outputs kept earlier (--record --keep): "
        "--record and --diff read them instead of running the reference commit",
    )
    ap.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.run:
        run_commands(a.tree.resolve(), a.run)
        return 0
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {"commit": BASE_COMMIT}
    if a.record:
        return record(a.commit or manifest["commit"], a.ref, a.keep)
    files = outputs(ROOT, a.keep)
    bad = compare(files, manifest)
    if not bad:
        print(
            f"golden: all {len(files)} outputs identical to {manifest['commit']}'s "
            f"(declared changes: {len(DECLARED)})"
        )
        return 0
    print(f"golden: {len(bad)} of {len(files)} outputs differ from {manifest['commit']}'s:")
    print("\n".join(f"  {rel}" for rel in bad))
    if a.diff:
        ref = read_folder(a.ref) if a.ref else reference(manifest["commit"])
        show_diff(files, apply_declared(ref), bad)
    else:
        print("(--diff shows how)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
