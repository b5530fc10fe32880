"""TraceFit: how a profile's run-level factors were fitted on a traced run, as the fit left them.

A profile of an engine no measured database holds (the traced agentic run's, `tlt workload check
--fit-steps`) is the database's costs with some of their fields fitted on the trace's steps. Each
fitted field is a `FittedFactor`: its value, its standard error, its declared range, its prior (in
words, with its source; empty: flat over the range) and its status, i.e. whether the trace pinned it
(`identified`), left it where its prior put it (`prior`: NOT IDENTIFIED, the prior sets it) or
pulled it to an end of its range (`edge`). The factors' covariance (in log space, the factors'
order) lets a tool draw engines the fit cannot tell apart (`tlt tail`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.contracts.schema import check_part, require

STATUSES = ("identified", "prior", "edge")
# What each status means, as a report prints it.
STATUS_WORDS = {"identified": "identified by the trace",
                "prior": "NOT IDENTIFIED: its prior sets it",
                "edge": "at its range's end: the trace pulls it past"}


@dataclass(frozen=True)
class FittedFactor:
    name: str  # the profile field it sets ("decode.per_seq_s") or a multiplier's name
    value: float
    se: float  # its standard error, in its own unit
    low: float  # the declared range
    high: float
    status: str  # one of STATUSES
    prior: str = ""  # its prior in words, with its source ("": flat over the range)

    def check(self) -> None:
        require(bool(self.name.strip()), "name", self.name, "the field the factor sets")
        require(0 < self.low < self.high, "low", self.low, "a range 0 < low < high")
        require(self.low <= self.value <= self.high, "value", self.value,
                f"a value inside its range {self.low:g}-{self.high:g}")
        require(math.isfinite(self.se) and self.se >= 0, "se", self.se, "a standard error >= 0")
        require(self.status in STATUSES, "status", self.status, "one of " + ", ".join(STATUSES))

    @property
    def identified(self) -> bool:
        return self.status == "identified"


@dataclass(frozen=True)
class TraceFit:
    factors: tuple[FittedFactor, ...]
    # the factors' covariance in log space (rows in the factors' order)
    log_covariance: tuple[tuple[float, ...], ...]
    fit_steps: tuple[int, ...]  # the trace's steps fitted on; the others are predictions
    moments_rms: float  # the fitted moments' rms log error at the fit

    def check(self) -> None:
        for i, f in enumerate(self.factors):
            check_part(f"factors[{i}]", f)
        n = len(self.factors)
        require(len(self.log_covariance) == n and all(len(r) == n for r in self.log_covariance),
                "log_covariance", f"{len(self.log_covariance)} rows",
                f"a {n} x {n} matrix, one row per factor")
        require(all(self.log_covariance[i][i] >= 0 for i in range(n)), "log_covariance",
                "a negative variance", "a covariance matrix (variances >= 0)")
        require(len(self.fit_steps) > 0, "fit_steps", self.fit_steps, "the steps fitted on")

    def factor(self, name: str) -> FittedFactor:
        for f in self.factors:
            if f.name == name:
                return f
        raise KeyError(name)
