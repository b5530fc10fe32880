"""Table A's TLT rows at the paper's own SD speedups: how far the simulated batch sizes let TLT go.

The simulator prices SD and places the decoding over batch sizes. To tell which of the two keeps a
Table A row below its published figure, price SD by the paper's own measurements instead: give
every second of the baseline's slowest engine's decoding, in each batch bucket where TLT's schedule
runs SD (32 and below), the best speedup Table C measured at that bucket's smallest batch (Table C
falls with the batch, and its best over 16-64 tokens to verify is what FastRL's trees reach at
most: an upper bound for every model, the 7B engines' SD gaining less at batch 1 by Table E),
and 1 above. Then

    rollout ceiling R = 1 / sum_b share_b / S_b,   step ceiling = 1 / ((1 - f) + f / R)

with f the baseline's rollout share of the step. A row whose ceiling is below its published figure
cannot reach it through SD's price: its batch sizes (or its rollout share) are what keep it down.
`needed` is the rollout speedup the published figure asks for at the simulated rollout share, and
`max_off_share` the largest share of the slowest engine's decoding above batch 32 that could still
give it, were all the rest at Table C's batch-1 best: what an RL step's log of running requests
per decode batch (FastRL's SGLang prints it) would settle.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.calibrate.published.microbenchmarks import Published

SD_OFF_ABOVE = 32  # FastRL's bs_threshold, the tlt policy's


@dataclass(frozen=True)
class Ceiling:
    model: str
    published: float  # Table A's TLT row
    rollout_share: float  # the baseline's rollout over its step
    rollout_ceiling: float  # R at Table C's best speedups
    step_ceiling: float
    needed_rollout: float  # the rollout speedup the published figure needs (inf: none reaches it)
    max_off_share: float  # the most decoding above batch 32 that still allows it (0: none)

    @property
    def reachable(self) -> bool:
        return self.step_ceiling >= self.published


def _lower_edge(label: str) -> int:
    """A bucket label's smallest batch ("1", "2-4", ">64")."""
    return int(label.lstrip(">").split("-")[0]) + (1 if label.startswith(">") else 0)


def best_table_c(pub: Published, batch: int) -> float:
    """Table C's best speedup over its tokens-to-verify rows at the largest measured batch not
    above `batch` (1.0 above SD_OFF_ABOVE: SD off)."""
    if batch > SD_OFF_ABOVE:
        return 1.0
    rows = [m for m in pub.measurements if m.table == "C"]
    at = max(m.batch for m in rows if m.batch <= batch)
    return max(m.value for m in rows if m.batch == at)


def ceiling(model: str, published: float, rollout_share: float, shares: dict[str, float],
            pub: Published) -> Ceiling:
    """One Table A model's TLT ceiling at Table C's speedups over its simulated batch buckets."""
    total = sum(shares.values())
    time = sum(v / total / best_table_c(pub, _lower_edge(k)) for k, v in shares.items() if v)
    r = 1.0 / time
    step = 1.0 / ((1.0 - rollout_share) + rollout_share / r)
    left = 1.0 / published - (1.0 - rollout_share)
    needed = rollout_share / left if left > 0 else float("inf")
    best = 1.0 / best_table_c(pub, 1)
    off = max(0.0, (1.0 / needed - best) / (1.0 - best))
    return Ceiling(model, published, rollout_share, r, step, needed, off)
