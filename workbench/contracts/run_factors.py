"""Run-level factors fitted to a real run's log (`tlt calibrate --run-log`), as a Profile records
them (`Profile.run_factors`): the values, their priors' medians on the run fitted on, the
posterior's draws, what they leave unexplained per phase group, and the model's error under a
change of run."""

from __future__ import annotations

from dataclasses import dataclass, replace

from workbench.contracts.schema import require


@dataclass(frozen=True)
class RunFactor:
    """One more run-level factor (workbench/runlog/priors.py's FACTORS past the four RunFactors
    names), with its prior's median on the run fitted on."""

    name: str
    value: float
    prior: float = 0.0  # 0: not recorded (the factor then transfers as it is)

    def check(self) -> None:
        require(self.value >= 0.0, "value", self.value, "a number >= 0")


@dataclass(frozen=True)
class PhaseScatter:
    """What a run's factors leave unexplained of one phase (gen, update, step) on the fit steps:
    the single steps' 5% and 95% quantiles of log(measured / predicted), and how far a stretch of
    steps strays (the sd of their blocks' medians: a run's bias)."""

    phase: str
    low: float
    high: float
    drift_sd: float = 0.0

    def check(self) -> None:
        require(self.low <= self.high, "low", self.low, "at most high")
        require(0.0 <= self.drift_sd < 1.0, "drift_sd", self.drift_sd, "a log-sd from 0 to 1")


@dataclass(frozen=True)
class RunFactors:
    """Run-level factors fitted to a real run's log (`tlt calibrate --run-log`) over a
    measured-database profile: what turns the database's engine into the run's.

    decode step = decode_speed x the database's step + step_overhead_s (per engine step);
    the RL step pays rl_step_s more (veRL times its weight sync inside the rollout);
    each phase outside the rollout is priced from what runs it (workbench/runlog/phases.py):
    train_speed x the database's forwards; the `extra` factors (a micro-batch's fixed cost, the
    host link's seconds per GB, a phase's fixed cost, a response's reward).
    Fitted on the log's first steps only (`fitted_on`), each as a multiple of what the run's
    config predicts (its prior's median, `*_prior*`: workbench/runlog/priors.py); a run of
    another shape on the same cluster takes the same multiples over its own engine and its own
    config's medians (`tlt validate --run-log`). `draws` are the posterior's draws of every
    factor's log-multiple about these values (decode_speed, step_overhead_s, rl_step_s,
    train_speed, then `extra`'s order), `scatter` what they leave unexplained per phase, and
    `model_error` the declared log-sd of a whole run's bias under a change of run (estimated
    from leave-one-run-out residuals; added only when the run predicted is not the one fitted)."""

    decode_speed: float
    step_overhead_s: float
    rl_step_s: float
    train_speed: float
    train_forwards: int  # forward-equivalents per token of the run's phases (informative)
    database_profile: str = ""  # the measured-database profile the factors apply to
    fitted_on: str = ""  # the log and its fitted steps
    # The priors' medians of the run fitted on (0: not recorded; the factors then transfer as
    # they are)
    decode_speed_prior: float = 0.0
    step_overhead_prior_s: float = 0.0
    rl_step_prior_s: float = 0.0
    train_speed_prior: float = 0.0
    extra: tuple[RunFactor, ...] = ()
    draws: tuple[tuple[float, ...], ...] = ()
    scatter: tuple[PhaseScatter, ...] = ()
    model_error: float = 0.0

    CORE = ("decode_speed", "step_overhead_s", "rl_step_s", "train_speed")
    CORE_PRIORS = ("decode_speed_prior", "step_overhead_prior_s", "rl_step_prior_s",
                   "train_speed_prior")

    def check(self) -> None:
        require(0.0 < self.decode_speed <= 1000.0, "decode_speed", self.decode_speed,
                "a factor > 0")
        require(0.0 <= self.step_overhead_s < 10.0, "step_overhead_s", self.step_overhead_s,
                "seconds, >= 0 and < 10")
        require(self.rl_step_s >= 0.0, "rl_step_s", self.rl_step_s, "seconds >= 0")
        require(0.0 < self.train_speed <= 1000.0, "train_speed", self.train_speed, "a factor > 0")
        require(self.train_forwards >= 1, "train_forwards", self.train_forwards, "an integer >= 1")
        n = len(self.CORE) + len(self.extra)
        require(all(len(d) == n for d in self.draws), "draws", "<rows>",
                f"rows of {n} log-multiples (the four factors above, then `extra`'s)")
        require(0.0 <= self.model_error < 1.0, "model_error", self.model_error,
                "a log-sd from 0 to 1")
        for part in self.extra + self.scatter:
            part.check()

    @property
    def names(self) -> tuple[str, ...]:
        return self.CORE + tuple(f.name for f in self.extra)

    @property
    def values(self) -> tuple[float, ...]:
        return tuple(getattr(self, n) for n in self.CORE) + tuple(f.value for f in self.extra)

    @property
    def priors(self) -> tuple[float, ...]:
        return tuple(getattr(self, n) for n in self.CORE_PRIORS) + tuple(
            f.prior for f in self.extra)

    def transferred(self, medians: tuple[float, ...]) -> "RunFactors":
        """The factors over another run of the cluster whose config predicts `medians` (`names`'
        order): the same multiples of its medians as of the fitted run's (a factor whose prior
        was not recorded transfers as it is)."""
        moved = [v * (m / p if p > 0 else 1.0)
                 for v, m, p in zip(self.values, medians, self.priors)]
        k = len(self.CORE)
        extra = tuple(replace(f, value=v, prior=m) for f, v, m in
                      zip(self.extra, moved[k:], medians[k:]))
        return replace(self, **dict(zip(self.CORE, moved[:k])),
                       **dict(zip(self.CORE_PRIORS, medians[:k])), extra=extra)
