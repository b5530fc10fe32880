"""`python -m real.profiler --arch NAME|config.json --device cpu|cuda [--tp N] --out FILE.parquet`.

Runs with the checkout on PYTHONPATH and nothing installed beyond torch, numpy, pandas, pyarrow
and pyyaml; prints one line per measured point to stderr, the output file last. Fit a Profile
to the file anywhere the workbench is installed: `tlt profile --measurements FILE --out P.yaml`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from real.profiler.grid import GRIDS
from real.profiler.settings import DTYPE_NAMES, make_settings
from real.profiler.shard import ALLREDUCE_LATENCY_S, NVLINK_BUS_BYTES_PER_S, Link
from workbench.contracts.schema import ConfigError


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m real.profiler", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--arch",
        required=True,
        help="architecture preset (workbench/contracts/presets/architectures) "
        "or a Hugging Face config.json",
    )
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument(
        "--tp", type=int, default=1, help="tensor-parallel degree (one rank is measured)"
    )
    ap.add_argument("--dtype", choices=DTYPE_NAMES, default=None,
                    help="default: bfloat16 on cuda, float32 on cpu")
    ap.add_argument(
        "--grid",
        choices=tuple(GRIDS),
        default=None,
        help="points to measure (default: the device's)",
    )
    ap.add_argument(
        "--repeats", type=int, default=None, help="timed runs per point (default: 30 cuda, 20 cpu)"
    )
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--passes",
        type=int,
        default=None,
        help="interleaved passes over the inference points, each "
        "point keeping its fastest (default: 1 cuda, 3 cpu, where other processes share the cores)",
    )
    ap.add_argument("--seed", type=int, default=0, help="seeds the random weights and inputs")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: 1 on cpu, timed on its own CPU clock; torch's on cuda)",
    )
    ap.add_argument(
        "--check-rounds",
        type=int,
        default=5,
        help="interleaved rounds of the whole-model check (0: skip)",
    )
    ap.add_argument("--allreduce-latency-us", type=float, default=1e6 * ALLREDUCE_LATENCY_S,
                    help="assumed latency of one TP all-reduce")
    ap.add_argument("--link-gbps", type=float, default=NVLINK_BUS_BYTES_PER_S / 1e9,
                    help="assumed NCCL bus bandwidth between TP ranks, GB/s")
    ap.add_argument("--out", type=Path, required=True, help="the measurements file (.parquet)")
    return ap


def settings_from(args: argparse.Namespace):
    """Validated Settings (errors name the option and the fix) before torch is imported."""
    if args.out.suffix != ".parquet":
        raise ConfigError("--out", "<file>", str(args.out), "a .parquet file name")
    return make_settings(
        args.arch,
        args.device,
        args.tp,
        args.dtype,
        args.grid,
        args.repeats,
        args.warmup,
        args.seed,
        args.threads,
        args.check_rounds,
        args.passes,
        Link(1e-6 * args.allreduce_latency_us, 1e9 * args.link_gbps),
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        st = settings_from(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from real.profiler.measure import measure
    from real.profiler.table import write_measurements

    def progress(i: int, n: int, line: str) -> None:
        print(f"[{i}/{n}] {line}", file=sys.stderr, flush=True)

    try:
        m = measure(st, progress=progress)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_measurements(args.out, m)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
