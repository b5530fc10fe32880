"""What a profile's numbers rest on, from what it records (`fitted_on`, `fit_error_pct`): its kind
(measured, published, calibrated, hand-set) and the one line pickers and profile pages show."""

from __future__ import annotations

from workbench.contracts.profile import Profile, load_profile

# What a profile's numbers rest on, from what it records (`fitted_on`, `fit_error_pct`): the
# prefixes are those the writers use (workbench/calibrate/captures/operators.py writes "profiler:",
# workbench/paper/profiles.py "tlt-paper:", `tlt calibrate` the traces' names).
MEASURED_PREFIX = "profiler:"
# workbench/calibrate/database/profile.py: NVIDIA's measured operator database
DATABASE_PREFIX = "aiconfigurator:"
PUBLISHED_PREFIX = "tlt-paper:"
RUNLOG_PREFIX = "runlog:"  # workbench/runlog/: a real run's log (`tlt calibrate --run-log`)
SWEEP_PREFIX = "sweep:"  # workbench/calibrate/sweeps/: an engine sweep (`tlt engine-sweep`)


def provenance_kind(p: Profile) -> str:
    """'measured' (operator-level, `tlt profile`), 'published' (fitted to published
    microbenchmarks), 'calibrated' (fitted to traces of real runs) or 'hand-set'."""
    if any(f.startswith((MEASURED_PREFIX, DATABASE_PREFIX)) for f in p.fitted_on):
        return "measured"
    if any(f.startswith(PUBLISHED_PREFIX) for f in p.fitted_on):
        return "published"
    return "calibrated" if p.fitted_on else "hand-set"


def provenance(p: Profile) -> str:
    """One line for pickers and profile pages: the kind, what it was fitted on and its fit error."""
    kind = provenance_kind(p)
    err = f", fit error {p.fit_error_pct:.1f}%" if p.fit_error_pct is not None else ""
    if kind == "measured":
        on = "; ".join(f.split(":", 1)[1] for f in p.fitted_on
                       if f.startswith((MEASURED_PREFIX, DATABASE_PREFIX)))
        database = any(f.startswith(DATABASE_PREFIX) for f in p.fitted_on)
        how = "measured database" if database else "operator level"
        return f"measured ({how}): {on}{err}"
    if kind == "published":
        return f"fitted to {len(p.fitted_on)} published tables{err}"
    if kind == "calibrated" and p.engine is not None:
        return f"calibrated on an engine sweep: {p.engine.label}{err}"
    if kind == "calibrated" and any(f.startswith(RUNLOG_PREFIX) for f in p.fitted_on):
        logs = "; ".join(f[len(RUNLOG_PREFIX):] for f in p.fitted_on)
        return f"calibrated on a real run's log: {logs}{err}"
    if kind == "calibrated":
        return f"calibrated on {len(p.fitted_on)} trace(s): {', '.join(p.fitted_on)}{err}"
    return "hand-set (datasheets and assumptions)"


def profile_choice_label(name: str) -> str:
    """A picker's label for a profile preset or file: its name and what its numbers rest on
    (`provenance_kind`); the bare name when it does not load (the page reports why on pick)."""
    try:
        return f"{name} · {provenance_kind(load_profile(name))}"
    except ValueError:  # ConfigError and FieldError both are: a label must not break a picker
        return name
