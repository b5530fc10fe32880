"""SD's speedup by draft length: the public figures and their split, what a longer draft costs, the
curve by draft length, and `tlt sd-curve` with several strategies."""

import json
from dataclasses import replace

import pytest
import yaml
from typer.testing import CliRunner

from sim.costs import draft_step_s
from workbench.calibrate.database.profile import (
    DRAFT_OVERHEAD_EXPONENT,
    PROFILE_OVERHEADS,
    SD_HOST_S_PER_SEQ,
)
from workbench.calibrate.published import sd_length as sl
from workbench.calibrate.published.database_check import table_d_engine
from workbench.calibrate.published.sd_batch import EngineConstants, engine, speedup
from workbench.calibrate.published.sd_series import (
    SD_LENGTH_PUBLISHED,
    load_sd_length_published,
)
from workbench.cli import app
from workbench.compare.sd_curve import Acceptance, sd_curves
from workbench.contracts.policy import DrafterKind
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.strategy import Strategy

USED = EngineConstants(PROFILE_OVERHEADS, DRAFT_OVERHEAD_EXPONENT, SD_HOST_S_PER_SEQ)
EAGLE = DrafterKind.EAGLE
runner = CliRunner()


@pytest.fixture(scope="module")
def series():
    return sl.length_series()


@pytest.fixture(scope="module")
def checks(series):
    return sl.length_checks(series, USED)


def test_the_files_declare_the_split(series):
    roles = {s.name: s.role for s in series}
    assert roles["tlt-depth-grid"] == "fit"  # what decides a step's cost against a pass's
    assert roles["tlt-table-c"] == "held_out"
    assert {"vllm-issue-20780-eagle", "vllm-issue-20780-eagle3", "sglang-pr-4247-eagle3"} <= {
        n for n, r in roles.items() if r == "held_out"
    }
    # Every scored figure carries the accepted length it is predicted at (an RL rollout's longer
    # drafts: its shortest draft's, carried by the acceptance shape); the MoE target's series
    # stays context (declared so before MoE engines were priced), and every engine is priced now.
    assert all(p.accepted for s in series if s.role != "context" and not s.rl_rollout
               for p in s.points)
    assert roles["nemo-rl-rl-zero"] == "fit" and roles["nemo-rl-rl-think"] == "held_out"
    assert roles["vllm-gpt-oss-120b-batch8"] == "context"
    assert sl.unpriced(series, USED) == []


def test_a_held_out_figure_is_predicted_without_its_own_value(tmp_path, checks):
    data = yaml.safe_load(SD_LENGTH_PUBLISHED.read_text(encoding="utf-8"))
    for s in data["series"]:
        for p in s["points"]:
            p["speedup"] = round(p["speedup"] * 0.5, 3)
    path = tmp_path / "len.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    halved = sl.length_checks(list(load_sd_length_published(path).series), USED)
    ours = {(c.series, c.strategy): c.predicted for c in checks}
    assert halved and all(ours[(c.series, c.strategy)] == c.predicted for c in halved)


def test_a_draft_step_costs_less_than_a_pass_spends_per_step():
    # The mechanism: on the TLT paper's engine a pass pays its drafter's and its tree's work once,
    # whatever the depth, so four more draft steps cost far less than a third more of the pass.
    prof = engine(replace(sl.tlt_series()[0], points=()), USED)
    d8, d12 = (draft_step_s(prof.drafter, EAGLE, 1, Strategy(n, 8, 64)) for n in (8, 12))
    assert d12 - d8 < (d8 / 8) * 4 * 0.6
    # ... which orders the depth x TV grid as published (depth 12 beats depth 8 at 64 tokens).
    el = {c.strategy: c for c in sl.length_checks(sl.tlt_series(), USED)}
    assert el["12_8_64"].predicted > el["8_8_64"].predicted
    assert el["12_8_64"].published > el["8_8_64"].published
    # A chain builds no tree: it pays the drafter's pass, not the tree's.
    chain, tree = Strategy.chain(7), Strategy(7, 4, 8)
    bare = table_d_engine()
    assert bare.drafter.tree_pass_s == 0.0
    assert draft_step_s(prof.drafter, EAGLE, 1, tree) - draft_step_s(
        prof.drafter, EAGLE, 1, chain
    ) == pytest.approx(prof.drafter.tree_pass_s + 7 * 3 * prof.drafter.eagle_s_per_seq, rel=1e-6)


def test_held_out_figures_and_their_best_draft_lengths(checks):
    s = sl.summarise(checks)
    assert s.held_out_points >= 40
    assert s.held_out_median_abs_error_pct < 20.0  # the goal
    assert s.best_agree > s.best_total / 2  # the best length as measured in most cases
    best = {(b.series, b.batch): b for b in sl.best_lengths(checks)}
    # Table C: long trees at batch 1, the shortest from batch 8 on, as measured.
    assert best[("tlt-table-c", 1)].predicted == "8_4_64"
    assert all(best[("tlt-table-c", b)].agrees for b in (8, 16, 32))


def test_longer_drafts_win_at_small_batch_and_lose_as_it_grows():
    prof = load_profile("h100-qwen2.5-7b-tp1-sglang")
    chains = tuple(Strategy.chain(k) for k in range(1, 9))
    c = sd_curves(prof, EAGLE, chains, Acceptance(tokens_per_pass=1.8), 1024.0,
                  (1, 8, 32, 128, 512))
    accepted = [x.accepted for x in c.curves]
    assert accepted == sorted(accepted) and accepted[0] == pytest.approx(1.8)
    lengths = [int(b) for b in c.best]
    assert lengths == sorted(lengths, reverse=True) and lengths[0] > lengths[-1]
    for i, b in enumerate(c.batches):  # the best is the fastest of the curves at that batch
        top = max(x.points[i].speedup for x in c.curves)
        if c.best[i] == "0":  # none pays here: SD off
            assert top <= 1.0
            continue
        assert top == pytest.approx(
            next(x for x in c.curves if x.strategy == c.best[i]).points[i].speedup
        )
        assert speedup(prof, EAGLE, b, 1024.0, chains[0], 1.8) == pytest.approx(
            c.curves[0].points[i].speedup
        )


def test_sd_curve_prints_several_strategies_side_by_side():
    args = ["sd-curve", "--profile", "h100-qwen2.5-32b-tp8-sglang", "--strategy",
            "chain:2,4,8_4_16", "--accept", "2.4", "--batches", "1,16,256"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert list(out["curves"]) == ["2", "4", "8_4_16"] and out["batch"] == [1, 16, 256]
    assert out["curves"]["2"]["accepted"] == pytest.approx(2.4)
    assert len(out["best"]) == 3 and all(b in ("0", "2", "4", "8_4_16") for b in out["best"])
    assert "best" in res.output and "8_4_16 (" in res.output
    dup = runner.invoke(app, args[:4] + ["2,chain:2"])
    assert dup.exit_code == 2 and "--strategy" in dup.output


def test_a_malformed_draft_length_file_is_refused_naming_the_field(tmp_path):
    data = yaml.safe_load(SD_LENGTH_PUBLISHED.read_text(encoding="utf-8"))
    data["series"][0]["points"][0]["strategy"] = "eight"
    path = tmp_path / "len.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"series\[0\]\.points\[0\]"):
        load_sd_length_published(path)
    data["schema"] = "tlt-sd-by-batch/1"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ConfigError, match="schema"):
        load_sd_length_published(path)
