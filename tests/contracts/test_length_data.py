"""The observed-lengths table and the Workload fields that point at it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from workbench.contracts.length_data import (
    COLUMNS,
    from_frame,
    read_observed,
    write_observed,
)
from workbench.contracts.schema import ConfigError, save
from workbench.contracts.workload import DynamicSampling, LengthModel, load_workload


def table(rows):
    return pd.DataFrame(rows, columns=list(COLUMNS))


def test_rows_are_sorted_into_groups_and_batches_keeping_member_order():
    df = table([(1, 0, 0, 10, 7, -1, -1), (0, 1, 1, 20, 5, -1, -1), (0, 0, 0, 30, 3, 1, 1),
                (0, 0, 0, 30, 4, 0, 1), (0, 1, 1, 20, 6, -1, -1)])
    obs = from_frame(df)
    assert obs.batches == 2 and obs.groups == 3
    assert [list(ids) for ids in obs.batch_groups] == [[0, 1], [2]]
    g = obs.group_at(0)
    assert list(g.lengths) == [3, 4] and g.prompt_tokens == 30 and g.mixed == 1
    assert list(obs.group_at(1).lengths) == [5, 6] and obs.group_at(1).rank == 1


def test_parquet_round_trip(tmp_path):
    obs = from_frame(table([(0, 0, 0, 10, 3, 1, 1), (0, 0, 0, 10, 9, 0, 1)]))
    write_observed(tmp_path / "x.parquet", obs)
    back = read_observed(tmp_path / "x.parquet")
    assert np.array_equal(back.length, obs.length) and np.array_equal(back.correct, obs.correct)


@pytest.mark.parametrize("bad, field",
                         [({"length": -3}, "length (row 0)"), ({"batch": "x"}, "batch (row 0)")])
def test_bad_tables_name_the_column_and_row(bad, field):
    row = dict(zip(COLUMNS, (0, 0, 0, 10, 3, -1, -1)))
    row.update(bad)
    with pytest.raises(ConfigError) as exc:
        from_frame(pd.DataFrame([row]), "t.parquet")
    assert exc.value.field == field and exc.value.source == "t.parquet"


def test_missing_column_and_missing_file_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="length"):
        from_frame(pd.DataFrame({"batch": [0], "group": [0]}))
    with pytest.raises(ConfigError, match="tlt workload import"):
        read_observed(tmp_path / "none.parquet")


def test_replay_needs_data_and_relative_data_is_read_next_to_the_workload(tmp_path):
    with pytest.raises(Exception, match="data"):
        LengthModel(kind="replay").check()
    wl = replace(load_workload("cpu-tiny"),
                 lengths=LengthModel(kind="replay", data="w.lengths.parquet"),
                 dynamic_sampling=DynamicSampling(True, 2.0))
    save(wl, tmp_path / "w.yaml")
    back = load_workload(tmp_path / "w.yaml")
    assert back.lengths.data == str(tmp_path / "w.lengths.parquet")
    assert back.dynamic_sampling == DynamicSampling(True, 2.0)


def test_median_tokens_allows_a_zero_clip_ratio_and_oversample_below_one_is_refused():
    LengthModel(clip_ratio=0.0, median_tokens=400.0).check()
    with pytest.raises(Exception, match="clip_ratio"):
        LengthModel(clip_ratio=0.0).check()
    with pytest.raises(Exception, match="oversample"):
        DynamicSampling(True, 0.5).check()


def test_the_shipped_dapo_workload_loads_with_its_table():
    wl = load_workload("polytrace-dapo-qwen2.5-32b")
    obs = read_observed(wl.lengths.data)
    assert wl.lengths.kind == "replay" and obs.responses == 4608 and obs.batches == 6
    assert wl.dynamic_sampling.enabled and wl.prompts_per_step == 32 and wl.group_size == 8
