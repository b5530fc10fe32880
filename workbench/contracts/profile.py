"""Profile: the cost and acceptance model of one rollout engine on one machine.

The functional forms that use these numbers are pure functions in
`sim/costs.py`, `sim/acceptance.py` and `sim/drafter.py`; calibration fits
the same forms, so a Profile means the same thing everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from workbench.contracts.cluster import Cluster
from workbench.contracts.energy import GpuPower
from workbench.contracts.engine_identity import EngineIdentity
from workbench.contracts.engine_mechanisms import EngineMechanisms
from workbench.contracts.run_factors import RunFactors
from workbench.contracts.schema import OMIT_DEFAULT, check_part, load, preset_names, require
from workbench.contracts.trace_fit import TraceFit
from workbench.contracts.uncertainty import CostPoint, CostUncertainty

PRESET_DIR = Path(__file__).parent / "presets" / "profiles"


@dataclass(frozen=True)
class ExpertRouting:
    """The routed experts of a mixture-of-experts target, as a pass reads them.

    A pass over n tokens, each routed to `per_token` (k) of `count` (E) experts per layer, reads
    the weights of E * (1 - (1 - k/E) ** n) distinct experts per layer in expectation, assuming
    every token picks its k experts uniformly and independently (`sim.costs.experts_touched`);
    `weights_s` is reading all of them once on one rank (its share under expert parallelism). A
    decode step of B sequences routes B tokens, a verify pass of K drafts B * (K + 1): at small
    batch speculation reads several times the expert weights; at large batch every expert is read
    either way."""

    count: int  # E
    per_token: int  # k
    weights_s: float  # reading every routed expert's weights once, one rank

    def check(self) -> None:
        require(self.count >= 2, "count", self.count, "an expert count >= 2")
        require(1 <= self.per_token <= self.count, "per_token", self.per_token,
                f"experts per token, 1 to count ({self.count})")
        require(0.0 <= self.weights_s < 10.0, "weights_s", self.weights_s,
                "seconds, >= 0 and < 10")


@dataclass(frozen=True)
class DecodeCost:
    """Latency of one target forward that verifies K drafted tokens for B sequences.

    T(B, ctx, T) = overhead_s + per_seq_s*B + kv_s_per_token*B*ctx
                   + max(W, C) + (1 - overlap) * min(W, C),
    W = weights_s, C = compute_s_per_token*B*T, T the tokens verified per sequence
    (a chain of K drafts: K + 1). Reading the weights costs the same for 1 or many
    tokens (memory-bound), so verifying drafts is nearly free until B*T tokens
    saturate compute when the two overlap fully (overlap 1, a roofline); with
    overlap 0 the compute adds to the weight reading (what the published H100
    microbenchmarks fit best). The KV cache is read once per sequence whatever T
    is, so long contexts make verification relatively cheaper. A mixture-of-experts
    target adds to W the routed experts its B*T tokens touch (`ExpertRouting`).
    """

    overhead_s: float  # per engine step: scheduling, launches, sampling setup
    per_seq_s: float  # per sequence in the batch: sampling, bookkeeping
    weights_s: float  # reading the weights once (0 on a CPU, where compute dominates)
    compute_s_per_token: float  # per token processed (B*(K+1) tokens per verify)
    kv_s_per_token: float  # per sequence per context token (attention's KV read)
    prefill_s_per_token: float  # per prompt token on admission
    # share of the smaller of weight reading and compute hidden under the larger
    overlap: float = 1.0
    # a mixture-of-experts target's routed experts (None: dense; weights_s holds every weight)
    experts: ExpertRouting | None = None

    def check(self) -> None:
        for name in ("overhead_s", "per_seq_s", "weights_s", "compute_s_per_token",
                     "kv_s_per_token", "prefill_s_per_token"):
            v = getattr(self, name)
            require(0.0 <= v < 10.0, name, v, "seconds, >= 0 and < 10")
        require(0.0 <= self.overlap <= 1.0, "overlap", self.overlap, "a share from 0 to 1")
        if self.experts is not None:
            check_part("experts", self.experts)
        require(self.overhead_s + self.weights_s + self.per_seq_s > 0, "overhead_s",
                self.overhead_s, "a positive step cost (overhead_s, per_seq_s or weights_s)")


@dataclass(frozen=True)
class DrafterCost:
    """Proposing drafts: the learned drafter runs one forward per draft step over batch x top-k
    candidates (a chain: top-k 1).

    `sd_host_s_per_seq` is the engine's host (CPU) work per sequence in every pass that
    speculates (accepting tokens, freeing the rejected KV slots, checking stop conditions): an
    engine overlaps its host work with the GPU's when it decodes plainly, not when it speculates
    (SGLang before its spec-v2 path, vLLM without async scheduling), so only SD pays it. 0: none
    (every profile fitted on its own engine's traces, where the step times hold it already)."""

    eagle_step_s: float  # one drafter forward, fixed part
    eagle_s_per_seq: float  # one drafter forward, per sequence and candidate
    ngram_s_per_seq: float  # n-gram lookup per sequence per verify pass (CPU)
    sd_host_s_per_seq: float = 0.0  # host work per sequence per SD pass, not overlapped
    # The engine's fixed work in every pass that speculates, either drafter kind (its rejection
    # sampler and the proposals' bookkeeping): on CPU most of what an SD step costs beyond a plain
    # one at small batch. 0: none (the measured-database profiles hold it in the draft overhead).
    sd_step_s: float = 0.0
    # A learned drafter's work once a pass, whatever its depth: the drafter's forward over the
    # tokens the target accepted (its KV cache must see them) and the proposals' bookkeeping.
    # `tree_pass_s`: a tree's (top-k > 1) building and verifying on top (masks, positions,
    # candidates); chains skip it. Both fitted on published figures (docs/formats.md); 0: none.
    eagle_pass_s: float = 0.0
    tree_pass_s: float = 0.0

    def check(self) -> None:
        for name in ("eagle_step_s", "eagle_s_per_seq", "ngram_s_per_seq", "sd_host_s_per_seq",
                     "sd_step_s", "eagle_pass_s", "tree_pass_s"):
            v = getattr(self, name)
            require(0.0 <= v < 1.0, name, v, "seconds, >= 0 and < 1")


@dataclass(frozen=True)
class PositionMiss:
    """From the `from_token`-th token of a response on, the drafter misses `miss` times as often
    as the pooled fit says: alpha there is 1 - (1 - alpha) * miss (1: the pooled drafter)."""

    from_token: int
    miss: float

    ROW_HELP = "a [from_token, miss] row, e.g. [0, 1.8], or a mapping with those fields"

    @classmethod
    def from_row(cls, row: list | tuple) -> dict:
        if len(row) != 2:
            raise ValueError(row)
        return {"from_token": row[0], "miss": row[1]}

    def check(self) -> None:
        require(self.from_token >= 0, "from_token", self.from_token, "a token position >= 0")
        require(0.0 <= self.miss <= 100.0, "miss", self.miss, "a multiplier from 0 to 100")


def position_row(rows: tuple[PositionMiss, ...], position: float) -> int:
    """The index of the row that holds at a position in the response (-1 without rows)."""
    i = -1
    for k, r in enumerate(rows):
        if position < r.from_token:
            break
        i = k
    return i


def next_position_edge(rows: tuple[PositionMiss, ...], position: float) -> float:
    """The first row boundary after `position` (inf: none)."""
    return next((float(r.from_token) for r in rows if r.from_token > position), float("inf"))


@dataclass(frozen=True)
class AcceptanceModel:
    """Per-position cumulative acceptance r_i = a ** (i ** shape), i = 1..depth.

    shape < 1 makes acceptance front-loaded: once the first drafted tokens are
    accepted the next are likelier to be, as measured (the i.i.d. geometric
    form, shape = 1, under-predicts long accepted runs). alpha for the learned
    drafter moves between `eagle_alpha_cold` (untrained) and
    `eagle_alpha_fresh` (aligned with the current policy) with its quality.

    A tree verifies several candidates per depth: with w = (tokens - 1) / depth
    candidates per level, the chance that the target's token is among them rises,
    a = 1 - (1 - alpha) * w ** -tree_width_gain (saturating in w; a chain has
    w = 1, a = alpha). A warm-started drafter (trained offline on the base
    model) starts at quality `warm_start_quality`, below one aligned with the
    RL policy (the TLT paper's Table G: 4.59 vs 6.53 tokens per pass).
    """

    eagle_alpha_fresh: float
    eagle_alpha_cold: float
    eagle_shape: float
    ngram_alpha: float
    ngram_shape: float
    staleness_per_update: float  # share of drafter quality lost per policy update
    tree_width_gain: float = 0.0  # 0: extra candidates per level do not help (chains only)
    warm_start_quality: float = 1.0  # quality of an offline-trained (warm-started) drafter
    # Model-free drafts from earlier responses (drafter.kind suffix: SPEC-RL, RhymeRL's HistoSpec,
    # Seer's grouped SD, suffix decoding). A pass finds a continuation to draft with probability
    # m = 1 - (1 - suffix_history_match * H) * (1 - suffix_group_match * S), H = 1 when the prompt
    # was answered in an earlier epoch, S = the share of its group's other responses already
    # finished; a found continuation's first i tokens are accepted with suffix_alpha ** (i **
    # shape). Defaults: assumed from those papers' descriptions (answers to a prompt repeat heavily
    # across epochs, less across siblings), not fitted. Acceptance moves along a response: its first
    # tokens are guessed worst, and a response that runs on to its cap often derails into text no
    # drafter guesses (or loops, which n-gram catches). Rows (from_token, miss), ascending; () is
    # flat. Measured by `tlt calibrate` from the SD steps' mean position in their responses
    # (workbench/calibrate/captures/position_acceptance.py).
    eagle_position: tuple[PositionMiss, ...] = ()
    ngram_position: tuple[PositionMiss, ...] = ()
    suffix_alpha: float = 0.85
    suffix_shape: float = 0.5
    suffix_history_match: float = 0.6
    suffix_group_match: float = 0.3

    def check(self) -> None:
        for name in ("eagle_alpha_fresh", "eagle_alpha_cold", "ngram_alpha"):
            v = getattr(self, name)
            require(0.0 <= v < 1.0, name, v, "a probability in [0, 1)")
        require(self.eagle_alpha_cold <= self.eagle_alpha_fresh, "eagle_alpha_cold",
                self.eagle_alpha_cold, f"at most eagle_alpha_fresh ({self.eagle_alpha_fresh})")
        for name in ("eagle_shape", "ngram_shape"):
            v = getattr(self, name)
            require(0.1 <= v <= 2.0, name, v, "a number from 0.1 to 2")
        require(0.0 <= self.staleness_per_update < 1.0, "staleness_per_update",
                self.staleness_per_update, "a share in [0, 1)")
        require(0.0 <= self.tree_width_gain <= 3.0, "tree_width_gain", self.tree_width_gain,
                "a number from 0 to 3")
        require(0.0 <= self.warm_start_quality <= 1.0, "warm_start_quality",
                self.warm_start_quality, "a quality from 0 to 1")
        for name in ("eagle_position", "ngram_position"):
            rows = getattr(self, name)
            for i, r in enumerate(rows):
                check_part(f"{name}[{i}]", r)
            starts = [r.from_token for r in rows]
            require(not rows or (starts[0] == 0 and starts == sorted(set(starts))), name, starts,
                    "rows ascending by from_token, the first from token 0")
        require(0.0 <= self.suffix_alpha < 1.0, "suffix_alpha", self.suffix_alpha,
                "a probability in [0, 1)")
        require(0.1 <= self.suffix_shape <= 2.0, "suffix_shape", self.suffix_shape,
                "a number from 0.1 to 2")
        for name in ("suffix_history_match", "suffix_group_match"):
            require(0.0 <= getattr(self, name) <= 1.0, name, getattr(self, name),
                    "a share from 0 to 1")


@dataclass(frozen=True)
class DrafterLearning:
    """How drafter training compute turns into drafter quality (a learning curve).

    quality <- target - (target - quality) * exp(-effective_tokens / learn_tokens)
    effective tokens are trained tokens, at most `useful_epochs` passes over the
    buffer, scaled down when the learning rate is off `lr_best` (log-normal in lr).
    """

    train_tokens_per_s: float  # drafter training throughput per GPU
    tokens_per_step: int  # tokens in one drafter optimiser step
    learn_tokens: float  # e-folding tokens of the learning curve
    useful_epochs: float  # passes over the buffer before more epochs stop helping
    lr_best: float
    lr_tolerance: float  # log-sd of the learning-rate efficiency curve

    def check(self) -> None:
        require(self.train_tokens_per_s > 0, "train_tokens_per_s", self.train_tokens_per_s,
                "a number > 0")
        require(self.tokens_per_step >= 1, "tokens_per_step", self.tokens_per_step,
                "an integer >= 1")
        require(self.learn_tokens > 0, "learn_tokens", self.learn_tokens, "a number > 0")
        require(self.useful_epochs > 0, "useful_epochs", self.useful_epochs, "a number > 0")
        require(0.0 < self.lr_best < 1.0, "lr_best", self.lr_best, "a number between 0 and 1")
        require(self.lr_tolerance > 0, "lr_tolerance", self.lr_tolerance, "a number > 0")


@dataclass(frozen=True)
class PhaseCost:
    """The RL step outside the rollout."""

    # policy update (and log-probs) per prompt+response token, GPU-seconds
    train_gpu_s_per_token: float
    weight_sync_s: float  # pushing new weights to every engine
    # A step whose rollout spot-trained the drafter also waits, after its last rollout returns, for
    # the spot trainers to stop (the drafter step in flight finishes: `tlt train`'s stop_latency_s),
    # and its sync pushes the new drafter to every engine and judges it (`tlt train` measures both;
    # `fit_runs` fits them). Synchronous RL only.
    spot_stop_s: float = 0.0
    drafter_sync_s: float = 0.0

    def check(self) -> None:
        for name in ("train_gpu_s_per_token", "weight_sync_s", "spot_stop_s", "drafter_sync_s"):
            require(getattr(self, name) >= 0, name, getattr(self, name), "a number >= 0")


@dataclass(frozen=True)
class Profile:
    name: str
    decode: DecodeCost
    drafter: DrafterCost
    acceptance: AcceptanceModel
    learning: DrafterLearning
    phases: PhaseCost
    description: str = ""
    source: str = ""  # provenance of the numbers
    fitted_on: tuple[str, ...] = ()  # traces this profile was fitted on (empty: hand-set)
    fit_error_pct: float | None = None  # median held-out error of the fit, if fitted
    # the model x GPU x TP x framework the costs hold for (None: not recorded)
    cluster: Cluster | None = None
    power: GpuPower | None = None  # watts per GPU state (None: unknown; energy is not reported)
    # The machine's speed the costs hold for, as the capture speed probe timed it (ms; None: not
    # measured). A trace captured while the probe ran slower is scaled down by as much before it
    # is compared (`tlt validate`; workbench/calibrate/captures/drift.py).
    speed_probe_ms: float | None = None
    # How much more than the probe the engine's steps slow down with the machine (fitted with the
    # costs: the exponent that explains the fit captures' step times best; 1: as much).
    speed_probe_exponent: float = 1.0
    run_factors: RunFactors | None = None  # fitted to a real run's log (None: not)
    # The engine an engine sweep measured, and the fit's held-out errors (None: not a sweep's)
    engine: EngineIdentity | None = None
    # How sure the costs are (None: not known; the tools then print no interval)
    uncertainty: CostUncertainty | None = None
    # The engine release whose speculative-pass mechanisms the costs price: CUDA-graph limits per
    # pass, eager launches, host work per draft step (None: none priced beyond the costs above)
    mechanisms: EngineMechanisms | None = field(default=None, metadata=OMIT_DEFAULT)
    # Its factors fitted on a traced run, each with its s.e., range and status (None: not)
    trace_fit: TraceFit | None = field(default=None, metadata=OMIT_DEFAULT)

    @property
    def cost_point(self) -> CostPoint:
        """The profile's own values of the cost components its uncertainty describes."""
        return CostPoint(1.0, self.decode.overhead_s, self.phases.weight_sync_s, 1.0)

    def check(self) -> None:
        require(bool(self.name.strip()), "name", self.name, "a non-empty name")
        for part in ("decode", "drafter", "acceptance", "learning", "phases"):
            check_part(part, getattr(self, part))
        if self.speed_probe_ms is not None:
            require(self.speed_probe_ms > 0, "speed_probe_ms", self.speed_probe_ms,
                    "a time in ms > 0")
        require(0.25 <= self.speed_probe_exponent <= 4.0, "speed_probe_exponent",
                self.speed_probe_exponent, "a number from 0.25 to 4")
        for part in ("cluster", "power", "run_factors", "uncertainty", "engine", "mechanisms",
                     "trace_fit"):
            if getattr(self, part) is not None:
                check_part(part, getattr(self, part))


def load_profile(name_or_path: str | Path) -> Profile:
    return load(Profile, name_or_path, PRESET_DIR)


def profile_presets() -> list[str]:
    return preset_names(PRESET_DIR)
