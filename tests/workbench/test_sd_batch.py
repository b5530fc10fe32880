"""The public SD-by-batch figures and the declared split that fits the SD host work on them."""

import pytest
import yaml

from workbench.calibrate.database.profile import (
    DRAFT_OVERHEAD_EXPONENT,
    PROFILE_OVERHEADS,
    SD_HOST_S_PER_SEQ,
)
from workbench.calibrate.published.sd_batch import (
    EngineConstants,
    crossover_check,
    fit_constants,
    fit_pass_and_host,
    series_checks,
)
from workbench.calibrate.published.sd_series import SD_PUBLISHED, load_sd_published
from workbench.contracts.schema import ConfigError

FIT, HELD_OUT = "eagle3-table3-eagle3", "eagle3-table3-eagle"


def _copy(tmp_path, change):
    data = yaml.safe_load(SD_PUBLISHED.read_text(encoding="utf-8"))
    change(data)
    path = tmp_path / "sd.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return load_sd_published(path)


def _scale(name, factor):
    def change(data):
        for s in data["series"]:
            if s["name"] == name:
                for p in s["points"]:
                    p["speedup"] = round(p["speedup"] * factor, 3)

    return change


def test_the_file_declares_the_split():
    pub = load_sd_published()
    assert [s.name for s in pub.by_role("fit")] == [FIT]
    assert HELD_OUT in [s.name for s in pub.by_role("held_out")]
    assert all(
        p.accepted
        for s in pub.by_role("fit") + pub.by_role("held_out")
        for p in s.points
        if p.measure == "speedup"
    )


def test_a_held_out_figure_changed_does_not_change_the_fit(tmp_path):
    args = (PROFILE_OVERHEADS, DRAFT_OVERHEAD_EXPONENT)
    shipped = fit_pass_and_host(load_sd_published().by_role("fit"), *args)
    held_out_moved = _copy(tmp_path, _scale(HELD_OUT, 0.7))
    assert fit_pass_and_host(held_out_moved.by_role("fit"), *args) == shipped
    fit_moved = _copy(tmp_path, _scale(FIT, 0.9))
    moved = fit_pass_and_host(fit_moved.by_role("fit"), *args)
    # lower speedups at every batch need a costlier pass (the host work's share of the fall
    # with the batch is unchanged: every figure moved by the same factor)
    assert moved[0] > shipped[0]
    # The prediction of the held-out series moves with the fit only, never with its own figures.
    c = EngineConstants(*args, shipped[1])
    pred = [x.predicted for x in series_checks(load_sd_published(), c) if x.series == HELD_OUT]
    assert pred == [x.predicted for x in series_checks(held_out_moved, c) if x.series == HELD_OUT]


def test_the_profiles_use_the_joint_fit():
    fit = fit_constants()
    assert fit.sd_host_s_per_seq == pytest.approx(SD_HOST_S_PER_SEQ, rel=0.02)
    for name in ("step_s", "eagle_pass_s", "tree_pass_s"):
        assert getattr(fit.overheads, name) == pytest.approx(
            getattr(PROFILE_OVERHEADS, name), rel=0.02
        ), name
    assert fit.overhead_exponent == pytest.approx(DRAFT_OVERHEAD_EXPONENT, abs=0.01)


def test_the_fit_series_crossover_and_errors_are_reported():
    pub = load_sd_published()
    c = EngineConstants(PROFILE_OVERHEADS, DRAFT_OVERHEAD_EXPONENT, SD_HOST_S_PER_SEQ)
    x = crossover_check(pub.named(FIT), c)
    assert (
        x.published is None and x.largest == 64 and x.agrees
    )  # SD still pays at 64, and is predicted to
    checks = series_checks(pub, c)
    assert {x.role for x in checks} == {"fit", "held_out"}
    assert all(abs(x.error_pct) < 50 for x in checks)


def test_a_malformed_file_is_refused_naming_the_field(tmp_path):
    def bad_role(data):
        data["series"][1]["role"] = "training"

    with pytest.raises(ConfigError, match=r"series\[1\]\.role"):
        _copy(tmp_path, bad_role)

    def no_measure(data):
        data["series"][0]["points"][0].pop("speedup")

    with pytest.raises(ConfigError, match=r"points\[0\]"):
        _copy(tmp_path, no_measure)
