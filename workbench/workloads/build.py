"""From imported lengths to what `tlt workload import` reports and the Workload it writes."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.stats import norm

from workbench.contracts.length_data import UNKNOWN, ObservedLengths, write_observed
from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError, FieldError, save
from workbench.contracts.workload import DynamicSampling, LengthModel, Workload
from workbench.workloads.agentic_build import import_agentic
from workbench.workloads.agentic_reader import is_turn_data
from workbench.workloads.mixture import MixtureFit, fit_mixture
from workbench.workloads.reader import Imported, SummaryTable, read_files

MODES = ("replay", "fit", "empirical")
# A workload with no cluster: the batch shape comes from the files, the cluster from the user
# (`tlt workload import`'s cluster flags, What-if's cluster boxes); one engine until chosen.
UNPLACED = Workload(name="uploaded-lengths", profile="(the cluster you pick)", workers=1,
                    prompts_per_step=1, group_size=1, max_response_tokens=32768)
CLUSTER_FLAGS = ("--model", "--gpu", "--tp", "--framework")
ASK_CLUSTER = ("the cluster the lengths ran on: --model M --gpu G --tp N --framework F [--engines "
               "N] (What-if's cluster boxes; `tlt profile --help` lists models and GPUs), or "
               "--base WORKLOAD to take a workload's cluster and shape (e.g. --base "
               "tlt-eval-qwen2.5-32b)")


@dataclass(frozen=True)
class Placement:
    """The cluster the user says the lengths ran on: a profile derived for its model x GPU x TP x
    framework (`profile.cluster`), and the engines (None: the files' data-parallel ranks, else
    one)."""

    profile: Profile
    engines: int | None = None


@dataclass(frozen=True)
class StepRow:
    step: int
    groups: int
    responses: int
    p50: float
    p90: float
    max: int
    tail_ratio: float  # longest / median
    clip_ratio: float


@dataclass(frozen=True)
class ImportReport:
    responses: int
    steps: int
    groups: int
    group_size: tuple[int, int, int]  # min, median, max
    cap: int
    cap_how: str
    clip_ratio: float
    quantiles: dict[str, float]  # p50, p90, p99, max
    per_step: list[StepRow]
    per_rank: dict[int, int]  # rank -> responses (empty: no ranks in the file)
    prompt_tokens: float | None  # median (None: not in the file)
    correctness: bool
    mixed_share: float | None  # share of groups with mixed rewards (None: unknown)


def infer_cap(obs: ObservedLengths, cap: int | None) -> tuple[int, str]:
    """The cap: given, or the longest length when several responses stop exactly there (a mass at
    the cap), or the next power of two above the longest (a guess, said as one)."""
    top = int(obs.length.max())
    if cap is not None:
        if top > cap:
            raise ConfigError("--cap", "cap", cap,
                              f"a cap >= the longest response in the files ({top} tokens)")
        return cap, "given (--cap)"
    if int((obs.length == top).sum()) >= max(2, math.ceil(0.001 * obs.responses)):
        return top, f"inferred: {int((obs.length == top).sum())} responses stop at {top}"
    guess = max(16, 1 << (top - 1).bit_length())
    return guess, (f"not evident (the longest, {top}, is no mass): assumed {guess}, the next power "
                   "of two; pass --cap")


def report(obs: ObservedLengths, cap: int, cap_how: str, steps: list[int]) -> ImportReport:
    lengths = np.minimum(obs.length, cap)
    sizes = np.diff(obs.starts)
    rows = []
    for b, ids in enumerate(obs.batch_groups):
        x = lengths[obs.batch == b]
        med = float(np.median(x))
        rows.append(StepRow(steps[b] if b < len(steps) else b, len(ids), len(x), med,
                            float(np.quantile(x, 0.9)), int(x.max()),
                            float(x.max() / med) if med else 0.0, float(np.mean(x >= cap))))
    ranks = ({int(r): int((obs.rank == r).sum()) for r in np.unique(obs.rank)}
             if len(obs.rank_values) else {})
    known_prompt = obs.prompt_tokens[obs.prompt_tokens != UNKNOWN]
    first = obs.starts[:-1]
    mixed = obs.mixed[first]
    return ImportReport(obs.responses, obs.batches, obs.groups,
                        (int(sizes.min()), int(np.median(sizes)),
                                                                 int(sizes.max())),
                        cap, cap_how, float(np.mean(lengths >= cap)),
                        {"p50": float(np.quantile(lengths, 0.5)),
                         "p90": float(np.quantile(lengths, 0.9)),
                         "p99": float(np.quantile(lengths, 0.99)), "max": float(lengths.max())},
                        rows, ranks, float(np.median(known_prompt)) if len(known_prompt) else None,
                        bool((obs.correct != UNKNOWN).all()),
                        float(np.mean(mixed == 1)) if (mixed != UNKNOWN).all() else None)


def build_workload(im: Imported, base: Workload, name: str, mode: str, cap: int, data_file: str,
                   fit: MixtureFit | None, source: str, description: str = "") -> Workload:
    """The Workload over observed lengths: the base's hardware, the files' batch shape, the chosen
    model. `description` "": one saying where the lengths and the shape come from."""
    if mode not in MODES:
        raise ConfigError("--mode", "mode", mode, ", ".join(MODES))
    obs = im.observed
    sizes = np.diff(obs.starts)
    per_batch = int(np.median([len(ids) for ids in obs.batch_groups]))
    prompts, steps, ds = per_batch, obs.batches, DynamicSampling()
    if im.dapo is not None:
        prompts = im.dapo.train_batch_size
        ds = DynamicSampling(True, float(f"{im.dapo.prompt_count / im.dapo.train_batch_size:.4g}"))
        steps = max(1, im.dapo.trainer_steps)
    known = obs.prompt_tokens[obs.prompt_tokens != UNKNOWN]
    fitted = fit.model if fit is not None else LengthModel()
    lengths = replace(fitted, kind="lognormal" if mode == "fit" else mode, data=data_file)
    wl = replace(base, name=name,
                 description=description or default_description(im, base, lengths.kind),
                 source=source,
                 prompts_per_step=prompts, group_size=int(np.median(sizes)),
                 max_response_tokens=cap,
                 prompt_tokens=int(np.median(known)) if len(known) else base.prompt_tokens,
                 steps=steps, lengths=lengths, dynamic_sampling=ds)
    return checked(wl, ", ".join(im.files))


def checked(wl: Workload, files: str) -> Workload:
    """`wl`, checked: a field the files put out of range is refused naming the files."""
    try:
        wl.check()
    except FieldError as exc:
        raise ConfigError(f"{files} (as the workload's {exc.field})", exc.field, exc.value,
                          exc.allowed) from None
    return wl


def default_description(im: Imported, base: Workload, kind: str) -> str:
    """Where an imported workload's lengths and shape come from, in one line."""
    obs = im.observed
    where = sorted({Path(f).parent.name or "." for f in im.files})
    src = where[0] if len(where) == 1 else ", ".join(Path(f).name for f in im.files[:3])
    head = f"Measured lengths from {src} ({obs.responses} responses, {obs.batches} steps; {kind})."
    if base.name == UNPLACED.name:  # placed on the cluster the user named
        return (f"{head} Shape: the files'. Cluster: {base.workers} engines x TP"
                f"{base.gpus_per_worker} {base.gpu} ({base.model}, {base.framework}), as given.")
    return (f"{head} Shape and "
            f"cluster: {base.name} ({base.workers} engines x TP{base.gpus_per_worker}).")


def data_path(out: Path) -> Path:
    return out.with_name(out.stem + ".lengths.parquet")


def write_workload(wl: Workload, obs: ObservedLengths, out: Path) -> Path:
    """The observed table beside the workload (OUT.lengths.parquet), then the workload: each atomic,
    the table first so a workload never names a file that is not there."""
    data = data_path(out)
    write_observed(data, obs)
    save(replace(wl, lengths=replace(wl.lengths, data=data.name)), out)
    return data


def fit_summary(summary: SummaryTable, cap: int, responses_per_step: int,
                source: str = "") -> tuple[LengthModel, list[str]]:
    """A lognormal per step from veRL's mean and max (the max of n draws sits near the quantile
    0.5^(1/n)), or from the clip ratio where the max is absent; pooled into a median, a log-sd and a
    drift. Correctness, the mixture and the within-group correlation are not identified by a
    summary."""
    z_n = float(_norm_ppf(0.5 ** (1.0 / max(2, responses_per_step))))
    mus, sds = [], []
    for i in range(len(summary.step)):
        m, top, clip = summary.mean[i], summary.max[i], summary.clip_ratio[i]
        if not (m > 0):
            raise ConfigError(f"{source} (step {summary.step[i]:g})", "response_length/mean", m,
                              "a mean length > 0")
        if np.isfinite(top) and top > m:
            gap = math.log(top / m)
            sd = z_n - math.sqrt(max(0.0, z_n * z_n - 2 * gap))
        elif np.isfinite(clip) and 0 < clip < 0.5:
            # log cap = mu + sd z_c and log mean = mu + sd^2 / 2
            z_c = float(_norm_ppf(1 - clip))
            gap = math.log(cap / m)
            sd = z_c - math.sqrt(max(0.0, z_c * z_c - 2 * gap))
        else:
            raise ConfigError(f"{source} (step {summary.step[i]:g})", "response_length/max", top,
                              "a max above the mean (or a clip ratio between 0 and 0.5) to fit the "
                              "spread")
        sds.append(float(np.clip(sd, 0.05, 3.0)))
        mus.append(math.log(m) - sds[-1] ** 2 / 2)
    x = np.arange(len(mus))
    drift = float(np.polyfit(x, mus, 1)[0]) if len(mus) >= 2 else 0.0
    mu0 = float(np.mean(mus) - drift * x.mean())
    model = LengthModel(clip_ratio=0.0, sigma=float(f"{np.mean(sds):.4g}"), mean_accuracy=0.5,
                        wrong_factor=1.0, drift_per_step=float(f"{np.clip(drift, -0.5, 0.5):.4g}"),
                        median_tokens=float(f"{math.exp(mu0):.5g}"))
    notes = ["step   mean: observed  fitted    max: observed  fitted"]
    for i, step in enumerate(summary.step):
        mu = mu0 + drift * i
        fit_mean = math.exp(mu + model.sigma ** 2 / 2)
        fit_max = min(cap, math.exp(mu + model.sigma * z_n))
        notes.append(f"{step:>4g}   {summary.mean[i]:>14,.0f}  {fit_mean:>6,.0f}   "
                     f"{summary.max[i]:>13,.0f}  {fit_max:>6,.0f}")
    notes.append("a per-step summary has no single lengths: one lognormal per step (no "
                 "correct/wrong mixture, group_correlation left at 0.5); replay and the KS "
                 "statistic need response lengths")
    return model, notes


def _norm_ppf(p: float) -> float:
    return float(norm.ppf(p))


def format_report(r: ImportReport, fit: MixtureFit | None) -> list[str]:
    """The report as text lines (the CLI prints them)."""
    lines = [(f"{r.responses:,} responses, {r.steps} steps, {r.groups} groups; group size "
              f"{r.group_size[1]} (min {r.group_size[0]}, max {r.group_size[2]})"),
             f"cap {r.cap} ({r.cap_how}); clip ratio {r.clip_ratio:.4f}",
             "lengths: " + ", ".join(f"{k} {v:,.0f}" for k, v in r.quantiles.items()),
             f"prompt tokens (median): {r.prompt_tokens:,.0f}" if r.prompt_tokens is not None else
             "prompt tokens: not in the files (the base workload's)",
             "per rank: " + (", ".join(f"rank {k}: {v:,}" for k, v in r.per_rank.items())
                             if r.per_rank else "not in the files (contiguous shards)"),
             "correctness: " + ("in the files" if r.correctness else "not in the files"),
             "mixed-reward groups: " + (f"{r.mixed_share:.1%}" if r.mixed_share is not None else
                                        "unknown (dynamic sampling would keep every group)"),
             "step  groups  responses    p50    p90     max  max/p50  clip"]
    lines += [(f"{s.step:>4}  {s.groups:>6}  {s.responses:>9}  {s.p50:>5.0f}  {s.p90:>5.0f}  "
               f"{s.max:>6}  {s.tail_ratio:>7.1f}  {s.clip_ratio:.3f}") for s in r.per_step]
    if fit is not None:
        lines.append("fit (lognormal mixture)  observed   fitted   error")
        lines += [f"  {row.quantity:<22} {row.observed:>8.4g} {row.fitted:>8.4g}  {row.error:+.3f}"
                  for row in fit.rows]
        lines.append(f"  KS statistic {fit.ks:.3f}; "
                     f"{'within 10% / 0.02' if fit.ok else 'NOT within 10% / 0.02'}")
        lines.append(f"  {fit.note}")
    return lines


@dataclass(frozen=True)
class ImportResult:
    workload: Workload
    lines: list[str]  # the report
    data: Path | None  # the observed table written beside the workload (None: from a summary)
    fit: MixtureFit | None


def profile_path(out: Path) -> Path:
    """Where a placed import's profile is written: beside the workload (OUT.profile.yaml)."""
    return out.with_name(out.stem + ".profile.yaml")


def _placed(base: Workload, placement: Placement, ranks: int, out: Path) -> tuple[Workload, str]:
    """`base` on the placement's cluster (engines: --engines, else the files' `ranks`, else 1), its
    profile the file written beside OUT; and the report's line saying so."""
    prof, c = placement.profile, placement.profile.cluster
    if c is None:
        raise ConfigError(prof.name, "cluster", None, "a profile derived for a GPU cluster")
    engines = placement.engines or ranks or 1
    how = ("--engines" if placement.engines else
           f"the files' {ranks} data-parallel ranks; --engines N to change" if ranks else
           "the files name no ranks; --engines N to change")
    wl = replace(base, workers=engines, gpus_per_worker=c.tp, profile=profile_path(out).name,
                 model=c.model, gpu=c.gpu, framework=c.framework)
    return wl, (f"cluster: {engines} engine{'s' if engines > 1 else ''} ({how}) x {c.label}; "
                f"profile {prof.name} from the measured database, written to {profile_path(out)}")


def _cluster_of(base: Workload | None, placement: Placement | None, im: Imported,
                out: Path) -> tuple[Workload, list[str]]:
    """The workload the lengths are put on: the placement's cluster (over `base`'s shape, if
    given), else `base`; refused when neither says where the lengths ran."""
    if im.summary is not None and base is None:
        raise ConfigError(", ".join(im.files), "<files>",
                          "are a per-step summary, which holds no batch shape",
                          "--base WORKLOAD for the shape (prompts per step x group size), with the "
                          "cluster flags or the base's cluster")
    if placement is None:
        assert base is not None  # import_workload refuses neither
        return base, []
    ranks = len(im.observed.rank_values) if im.observed is not None else 0
    wl, line = _placed(base or UNPLACED, placement, ranks, out)
    return wl, [line]


def _import_turns(paths: list[str | Path], out: Path, base: Workload | None,
                  placement: Placement | None, mode: str, cap: int | None, name: str | None,
                  source: str, description: str) -> ImportResult:
    """Multi-turn trajectories (agentic_build.py) on the placement's cluster or `base`'s."""
    placed: list[str] = []
    if placement is not None:
        base, line = _placed(base or UNPLACED, placement, 0, out)
        placed = [line]
    assert base is not None  # import_workload refuses neither
    a = import_agentic(paths, out, base, mode, cap, name, source, description)
    _write_profile(placement, out)
    return ImportResult(a.workload, a.lines + placed, a.data, None)


def import_workload(paths: list[str | Path], out: Path, base: Workload | None,
                    mode: str = "replay", cap: int | None = None, name: str | None = None,
                    responses_per_step: int | None = None, source: str = "",
                    description: str = "", placement: Placement | None = None) -> ImportResult:
    """Read the files, report, fit, and write OUT (and OUT.lengths.parquet; with a `placement`,
    OUT.profile.yaml): all checked before anything is written. The cluster is the placement's or
    `base`'s: with neither, nothing is read and the error names the flags."""
    if mode not in MODES:
        raise ConfigError("--mode", "mode", mode, ", ".join(MODES))
    if base is None and placement is None:
        raise ConfigError(", ".join(CLUSTER_FLAGS), "<option>", "not given (the length files "
                          "name no model, GPU, TP degree or engine)", ASK_CLUSTER)
    if is_turn_data(paths):
        return _import_turns(paths, out, base, placement, mode, cap, name, source, description)
    im = read_files(paths)
    name = name or out.stem
    base, placed = _cluster_of(base, placement, im, out)
    if im.summary is not None:
        cap = cap or base.max_response_tokens
        model, notes = fit_summary(im.summary, cap, responses_per_step or base.sequences_per_step,
                                   ", ".join(im.files))
        fitted = (f"Fitted to veRL's per-step length metrics ({len(im.summary.step)} steps). "
                  f"Shape and cluster: {base.name}" + (f", on {base.workers} engines x TP"
                  f"{base.gpus_per_worker} {base.gpu} ({base.model}, {base.framework}) as given."
                  if placement else "."))
        wl = replace(base, name=name, source=source, max_response_tokens=cap,
                     steps=len(im.summary.step), description=description or fitted,
                     lengths=model)
        checked(wl, ", ".join(im.files))
        _write_profile(placement, out)
        save(wl, out)
        lines = [f"{len(im.summary.step)} steps of veRL's length metrics; cap {cap}",
                 f"fitted: median {model.median_tokens:,.0f} tokens, log-sd {model.sigma}, "
                 f"drift {model.drift_per_step}"]
        return ImportResult(wl, lines + notes + im.notes + placed, None, None)
    obs = im.observed
    cap, how = infer_cap(obs, cap)
    fit = fit_mixture(obs, cap)
    wl = build_workload(im, base, name, mode, cap, data_path(out).name, fit, source, description)
    notes = list(im.notes)
    if mode == "fit" and wl.dynamic_sampling.enabled and not fit.labelled:
        wl = replace(wl, dynamic_sampling=replace(wl.dynamic_sampling, enabled=False))
        notes.append("dynamic sampling is off under --mode fit: without correctness in the files "
                     "the model's components are not rewards (replay filters by what DAPO kept)")
    lines = format_report(report(obs, cap, how, im.steps), fit) + notes + placed
    _write_profile(placement, out)
    data = write_workload(wl, obs, out)
    ds = wl.dynamic_sampling
    sampling = f", dynamic sampling x{ds.oversample}" if ds.enabled else ""
    lines.append(f"wrote {out} ({wl.lengths.kind}; prompts_per_step {wl.prompts_per_step}, "
                 f"group_size {wl.group_size}{sampling}) and {data}")
    return ImportResult(wl, lines, data, fit)


def _write_profile(placement: Placement | None, out: Path) -> None:
    if placement is not None:
        save(placement.profile, profile_path(out))
