"""`tlt sd-curve`: SD's speedup by batch on one engine, its crossover and the policy it implies."""

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from workbench.cli import app
from workbench.contracts.policy import load_policy
from workbench.contracts.strategy import Strategy
from workbench.contracts.profile import load_profile
from workbench.compare.sd_curve import (
    Acceptance,
    crossover_batch,
    policy_check,
    sd_curve,
    speedup,
    tokens_per_pass,
)

runner = CliRunner()
PROFILE = "h100-qwen2.5-7b-tp1-sglang"
CHAIN3 = Strategy.chain(3)


def _with_host(prof, h):
    return replace(prof, drafter=replace(prof.drafter, sd_host_s_per_seq=h))


def test_the_last_line_is_the_curve_as_json():
    res = runner.invoke(
        app,
        [
            "sd-curve",
            "--profile",
            PROFILE,
            "--strategy",
            "chain:3",
            "--accept",
            "2.79",
            "--context",
            "512",
            "--batches",
            "1,8,64,256",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert out["batch"] == [1, 8, 64, 256] and len(out["speedup"]) == 4
    assert isinstance(out["crossover_batch"], int) and out["speedup"][0] > 1.0 > out["speedup"][-1]
    assert "SD stops paying from batch" in res.output and "sd_threshold" in res.output
    assert out["crossover_batch"] == out["sd_threshold"] + 1 and out["stops_because"]


def test_the_crossover_is_the_first_batch_where_sd_is_slower():
    prof = load_profile(PROFILE)
    c = sd_curve(prof, "eagle", CHAIN3, Acceptance(tokens_per_pass=2.79), 512.0)
    b = c.strategy_crossover  # the strategy asked about, alone
    assert b is not None and 1 < b <= 512
    assert speedup(prof, "eagle", b, 512.0, CHAIN3, 2.79) < 1.0
    assert all(speedup(prof, "eagle", x, 512.0, CHAIN3, 2.79) >= 1.0 for x in range(1, b))
    # The one answer is the policy's: where every candidate (chain 3 among them) loses; the
    # threshold sits just below it, and above it every bucket is off.
    assert c.crossover_batch is not None and c.crossover_batch >= b
    assert c.sd_threshold == c.crossover_batch - 1
    assert all((p.strategy == "0") == (p.speedup <= 1.0) for p in c.buckets)
    assert all(p.strategy == "0" for p in c.buckets if p.min_batch > c.sd_threshold)


def test_the_speedup_rises_with_acceptance_and_falls_with_the_host_work_at_every_batch():
    prof = load_profile(PROFILE)
    batches = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    lo = [speedup(prof, "eagle", b, 2048.0, CHAIN3, 2.3) for b in batches]
    hi = [speedup(prof, "eagle", b, 2048.0, CHAIN3, 2.8) for b in batches]
    assert all(h > x for h, x in zip(hi, lo))
    none, more = _with_host(prof, 0.0), _with_host(prof, 2 * prof.drafter.sd_host_s_per_seq)
    for b in batches:
        assert (
            speedup(more, "eagle", b, 2048.0, CHAIN3, 2.8)
            < speedup(prof, "eagle", b, 2048.0, CHAIN3, 2.8)
            < speedup(none, "eagle", b, 2048.0, CHAIN3, 2.8)
        )
    # The host work costs SD a share that grows with the batch.
    ratio = [
        speedup(none, "eagle", b, 2048.0, CHAIN3, 2.8)
        / speedup(prof, "eagle", b, 2048.0, CHAIN3, 2.8)
        for b in batches
    ]
    assert ratio == sorted(ratio)
    # On the shipped profiles every cost SD adds per sequence exceeds a plain step's: it only falls.
    assert hi == sorted(hi, reverse=True)
    assert crossover_batch(more, "eagle", CHAIN3, 2.8, 2048.0) < crossover_batch(
        prof, "eagle", CHAIN3, 2.8, 2048.0
    )


def test_acceptance_as_tokens_per_pass_or_by_position():
    prof = load_profile(PROFILE)
    by_pos = Acceptance(positions=(0.8, 0.64, 0.51))
    assert tokens_per_pass(prof, "eagle", by_pos, CHAIN3, CHAIN3) == pytest.approx(2.95)
    assert tokens_per_pass(prof, "eagle", by_pos, Strategy.chain(2), CHAIN3) == pytest.approx(2.44)
    given = Acceptance(tokens_per_pass=2.79)
    assert tokens_per_pass(prof, "eagle", given, CHAIN3, CHAIN3) == pytest.approx(2.79)
    # Another strategy keeps the model's shape, scaled to what was given at the reference.
    longer = tokens_per_pass(prof, "eagle", given, Strategy.chain(5), CHAIN3)
    assert 2.79 < longer < tokens_per_pass(prof, "eagle", Acceptance(), Strategy.chain(5), CHAIN3)


@pytest.mark.parametrize(
    "args, field",
    [
        (["--accept", "9"], "--accept"),
        (["--accept", "0.5,0.7"], "--accept"),
        (["--strategy", "chain:x"], "--strategy"),
        (["--batches", "0,4"], "--batches"),
        (["--drafter", "medusa"], "--drafter"),
    ],
)
def test_bad_input_is_refused_naming_the_option(args, field):
    res = runner.invoke(app, ["sd-curve", "--profile", PROFILE, *args])
    assert res.exit_code == 2 and field in res.output, res.output


def test_a_shipped_policys_threshold_is_checked_against_the_crossover():
    prof = load_profile("h100-qwen2.5-32b-tp4-sglang")
    c = policy_check(prof, load_policy("tlt"))
    assert c.sd_threshold == 32 and c.strategy == "8_4_8" and c.crossover_batch is not None
    assert c.verdict
