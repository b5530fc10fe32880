"""Draft length per batch size as the scheduler keeps it and as rows
(real/rollout/draft_lengths.py): what `RolloutEngine.set_draft_lengths` writes and
`current_draft_lengths` reads back, without vLLM."""

from __future__ import annotations

import pytest

from real.rollout.draft_lengths import lookup_rows, rows_lookup, started_lookup
from real.rollout.spec_config import EngineConfigError


def test_rows_round_trip_through_the_schedulers_lookup_with_uncovered_batches_at_zero():
    lookup = rows_lookup([(1, 2, 4), (3, 5, 2)], max_num_seqs=8, cap=4)
    assert lookup == [0, 4, 4, 2, 2, 2, 0, 0, 0]  # index 0 unused; 6-8 uncovered: SD off
    assert lookup_rows(lookup, 8) == [(1, 2, 4), (3, 5, 2), (6, 8, 0)]
    # A range past max_num_seqs is cut there.
    assert rows_lookup([(1, 100, 3)], max_num_seqs=4, cap=4) == [0, 3, 3, 3, 3]


def test_an_engine_that_cannot_change_draft_lengths_runs_its_start_up_k_everywhere():
    assert started_lookup(None, 3, 0) == [0, 0, 0, 0]
    assert lookup_rows(started_lookup({"num_speculative_tokens": 5}, 4, 5), 4) == [(1, 4, 5)]


@pytest.mark.parametrize("rows, says", [
    ([(1, 2)], "give (min_batch, max_batch, draft_len)"),
    ([(0, 2, 1)], "needs 1 <= min_batch <= max_batch and K >= 0"),
    ([(3, 2, 1)], "needs 1 <= min_batch <= max_batch and K >= 0"),
    ([(1, 2, -1)], "needs 1 <= min_batch <= max_batch and K >= 0"),
    ([(1, 2, 9)], "K=9 is above this engine's num_speculative_tokens (4)"),
    ([(1, 4, 2), (3, 6, 1)], "overlaps an earlier row"),
])
def test_bad_rows_are_refused_naming_the_row_and_the_fix(rows, says):
    with pytest.raises(EngineConfigError, match="draft length row") as err:
        rows_lookup(rows, max_num_seqs=8, cap=4)
    assert says in str(err.value)
