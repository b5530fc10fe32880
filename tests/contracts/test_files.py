"""Policy, Workload and Profile files: clear errors for bad files, and faithful round-trips."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from workbench.contracts.policy import (
    BanditConfig,
    DrafterConfig,
    DrafterKind,
    Policy,
    ScheduleBucket,
    SpotTraining,
    Strategy,
    load_policy,
    policy_presets,
)
from workbench.contracts.profile import load_profile, profile_presets
from workbench.contracts.schema import ConfigError, FieldRenamed, differences, save
from workbench.contracts.workload import load_workload, workload_presets

GOOD_POLICY = {
    "name": "mine",
    "sd_threshold": 32,
    "schedule": [[1, 8, 4], [9, 32, 2]],
    "bandit": {"algorithm": "beg", "arms": [0, 2, 4], "epsilon": 0.1},
    "drafter": {"kind": "eagle", "ngram_fallback": True},
    "spot_training": {"enabled": True},
}

GOOD_WORKLOAD = {
    "name": "mine",
    "profile": "cpu-tiny",
    "workers": 2,
    "prompts_per_step": 4,
    "group_size": 2,
    "max_response_tokens": 256,
    "lengths": {"clip_ratio": 0.05},
}


def _write(path: Path, data) -> Path:
    if isinstance(data, str):
        path.write_text(data)
    elif path.suffix == ".json":
        path.write_text(json.dumps(data))
    else:
        path.write_text(yaml.safe_dump(data))
    return path


def _with(base: dict, dotted: str, value) -> dict:
    data = json.loads(json.dumps(base))
    node = data
    *parents, leaf = dotted.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return data


def _assert_clear(err: ConfigError, path: Path, field: str, value_text: str,
                  allowed_text: str) -> None:
    msg = str(err)
    assert str(path) in msg
    assert f"'{field}'" in msg, msg
    assert value_text in msg, msg
    assert "allowed" in msg and allowed_text in msg, msg
    assert err.field == field


def test_good_files_load(tmp_path):
    for suffix in (".yaml", ".json"):
        p = load_policy(_write(tmp_path / f"p{suffix}", GOOD_POLICY))
        assert p.schedule == (ScheduleBucket(1, 8, 4), ScheduleBucket(9, 32, 2))
        assert p.bandit.arms == (0, 2, 4) and p.bandit.algorithm == "beg"
        w = load_workload(_write(tmp_path / f"w{suffix}", GOOD_WORKLOAD))
        assert w.workers == 2 and w.lengths.clip_ratio == 0.05


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_unknown_field(tmp_path, suffix):
    path = _write(tmp_path / f"bad{suffix}", _with(GOOD_POLICY, "bandit.epsilom", 0.2))
    with pytest.raises(ConfigError) as exc:
        load_policy(path)
    _assert_clear(exc.value, path, "bandit.epsilom", "0.2", "epsilon")


def test_unknown_top_level_field(tmp_path):
    path = _write(tmp_path / "bad.yaml", _with(GOOD_WORKLOAD, "wokers", 3))
    with pytest.raises(ConfigError) as exc:
        load_workload(path)
    _assert_clear(exc.value, path, "wokers", "3", "workers")


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_wrong_type(tmp_path, suffix):
    path = _write(tmp_path / f"bad{suffix}", _with(GOOD_WORKLOAD, "workers", "four"))
    with pytest.raises(ConfigError) as exc:
        load_workload(path)
    _assert_clear(exc.value, path, "workers", "'four'", "whole number")


def test_wrong_type_nested(tmp_path):
    path = _write(tmp_path / "bad.yaml", _with(GOOD_POLICY, "bandit.window", "32"))
    with pytest.raises(ConfigError) as exc:
        load_policy(path)
    _assert_clear(exc.value, path, "bandit.window", "'32'", "whole number")
    path = _write(tmp_path / "bad2.yaml", _with(GOOD_WORKLOAD, "lengths.sigma", "wide"))
    with pytest.raises(ConfigError) as exc:
        load_workload(path)
    _assert_clear(exc.value, path, "lengths.sigma", "'wide'", "number")


def test_bool_is_not_an_int(tmp_path):
    path = _write(tmp_path / "bad.yaml", _with(GOOD_WORKLOAD, "workers", True))
    with pytest.raises(ConfigError) as exc:
        load_workload(path)
    _assert_clear(exc.value, path, "workers", "True", "whole number")


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_out_of_range(tmp_path, suffix):
    path = _write(tmp_path / f"bad{suffix}", _with(GOOD_POLICY, "bandit.epsilon", 1.5))
    with pytest.raises(ConfigError) as exc:
        load_policy(path)
    _assert_clear(exc.value, path, "bandit.epsilon", "1.5", "0 to 1")


@pytest.mark.parametrize("dotted,value,allowed", [
    ("lengths.clip_ratio", 0.7, "between 0 and 0.5"),
    ("lengths.group_correlation", 1.0, "[0, 1)"),
    ("workers", 0, ">= 1"),
    ("max_response_tokens", 8, "16"),
])
def test_out_of_range_workload(tmp_path, dotted, value, allowed):
    path = _write(tmp_path / "bad.yaml", _with(GOOD_WORKLOAD, dotted, value))
    with pytest.raises(ConfigError) as exc:
        load_workload(path)
    _assert_clear(exc.value, path, dotted, repr(value), allowed)


@pytest.mark.parametrize("dotted,value", [
    ("spot_training.lr", 2.0),
    ("spot_training.min_idle_workers", 0),
    ("drafter.switch_margin", -0.1),
])
def test_out_of_range_nested_policy_parts(tmp_path, dotted, value):
    path = _write(tmp_path / "bad.yaml", _with(GOOD_POLICY, dotted, value))
    with pytest.raises(ConfigError) as exc:
        load_policy(path)
    _assert_clear(exc.value, path, dotted, repr(value), "")


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_bad_enum(tmp_path, suffix):
    path = _write(tmp_path / f"bad{suffix}", _with(GOOD_POLICY, "bandit.algorithm", "foo"))
    with pytest.raises(ConfigError) as exc:
        load_policy(path)
    _assert_clear(exc.value, path, "bandit.algorithm", "'foo'", "'beg'")
    for name in ("fixed", "ucb1", "egreedy"):
        assert repr(name) in str(exc.value)


def test_a_bad_drafter_kind_names_the_field_and_the_kinds(tmp_path):
    path = _write(tmp_path / "bad.yaml", _with(GOOD_POLICY, "drafter.kind", "medusa"))
    with pytest.raises(ConfigError) as exc:
        load_policy(path)
    _assert_clear(exc.value, path, "drafter.kind", "'medusa'", "'none', 'ngram', 'eagle', 'suffix'")


def test_drafter_kinds_are_members_that_read_as_their_names(tmp_path):
    """Loaded or built in code, a drafter kind is a DrafterKind; files, tables and messages show
    its name, as before."""
    pol = load_policy(_write(tmp_path / "p.yaml", GOOD_POLICY))
    built = DrafterConfig(kind="ngram")
    assert pol.drafter.kind is DrafterKind.EAGLE
    assert built.kind is DrafterKind.NGRAM
    assert pol.drafter.kind == "eagle" and {"eagle": 1}[pol.drafter.kind] == 1
    kind = pol.drafter.kind
    assert f"{kind}|{kind:>6}|{kind!r}" == "eagle| eagle|'eagle'"
    save(pol, tmp_path / "back.yaml")
    assert yaml.safe_load((tmp_path / "back.yaml").read_text())["drafter"]["kind"] == "eagle"


def test_a_file_with_the_old_training_field_loads_with_a_notice(tmp_path):
    """`training` is `spot_training`'s old name: the file loads as before, and says so."""
    old = {k: v for k, v in GOOD_POLICY.items() if k != "spot_training"}
    old["training"] = {"enabled": True, "lr": 3e-4}
    path = _write(tmp_path / "old.yaml", old)
    with pytest.warns(FieldRenamed, match=r"old\.yaml: field 'training' is now 'spot_training'"):
        pol = load_policy(path)
    assert pol.spot_training.enabled and pol.spot_training.lr == 3e-4
    both = _write(tmp_path / "both.yaml", {**GOOD_POLICY, "training": {"enabled": True}})
    with pytest.raises(ConfigError) as exc:
        load_policy(both)
    _assert_clear(exc.value, both, "training", "", "'spot_training'")


def test_non_contiguous_schedule(tmp_path):
    path = _write(tmp_path / "bad.yaml", _with(GOOD_POLICY, "schedule", [[1, 8, 4], [10, 32, 2]]))
    with pytest.raises(ConfigError) as exc:
        load_policy(path)
    _assert_clear(exc.value, path, "schedule[1].min_batch", "10", "9")
    assert "contiguous" in str(exc.value)


def test_schedule_must_start_at_batch_1_and_rows_be_well_formed(tmp_path):
    path = _write(tmp_path / "bad.yaml", _with(GOOD_POLICY, "schedule", [[2, 8, 4], [9, 32, 2]]))
    with pytest.raises(ConfigError) as exc:
        load_policy(path)
    _assert_clear(exc.value, path, "schedule[0].min_batch", "2", "1")
    path = _write(tmp_path / "bad2.yaml", _with(GOOD_POLICY, "schedule", [[1, 8], [9, 32, 2]]))
    with pytest.raises(ConfigError) as exc:
        load_policy(path)
    _assert_clear(exc.value, path, "schedule[0]", "[1, 8]", "[min_batch, max_batch, draft_len]")
    path = _write(tmp_path / "bad3.yaml", _with(GOOD_POLICY, "schedule", [[1, 8, 40], [9, 32, 2]]))
    with pytest.raises(ConfigError) as exc:
        load_policy(path)
    _assert_clear(exc.value, path, "schedule[0].draft_len", "40", "0 to 32")


def test_threshold_beyond_schedule(tmp_path):
    path = _write(tmp_path / "bad.yaml", _with(GOOD_POLICY, "sd_threshold", 64))
    with pytest.raises(ConfigError) as exc:
        load_policy(path)
    _assert_clear(exc.value, path, "sd_threshold", "64", "32")


def test_unparseable_yaml(tmp_path):
    path = _write(tmp_path / "bad.yaml", "name: [unclosed\nworkers: 2\n")
    with pytest.raises(ConfigError) as exc:
        load_workload(path)
    msg = str(exc.value)
    assert str(path) in msg and "expected" in msg and "YAML" in msg


def test_unparseable_json(tmp_path):
    path = _write(tmp_path / "bad.json", '{"name": "x",')
    with pytest.raises(ConfigError) as exc:
        load_policy(path)
    msg = str(exc.value)
    assert str(path) in msg and "expected" in msg and "JSON" in msg


def test_not_a_mapping(tmp_path):
    path = _write(tmp_path / "bad.yaml", "- just\n- a list\n")
    with pytest.raises(ConfigError) as exc:
        load_policy(path)
    assert str(path) in str(exc.value) and "mapping" in str(exc.value)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_missing_required_field(tmp_path, suffix):
    data = dict(GOOD_WORKLOAD)
    del data["workers"]
    path = _write(tmp_path / f"bad{suffix}", data)
    with pytest.raises(ConfigError) as exc:
        load_workload(path)
    _assert_clear(exc.value, path, "workers", "<missing>", "int")


def test_missing_file_and_unknown_preset(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as exc:
        load_policy(missing)
    assert str(missing) in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        load_policy("no-such-preset")
    msg = str(exc.value)
    assert "no-such-preset" in msg
    for name in ("baseline", "static-sd", "tlt"):
        assert name in msg


def test_every_preset_loads():
    assert {"baseline", "static-sd", "tlt"} <= set(policy_presets())
    for name in policy_presets():
        p = load_policy(name)
        assert p.name == name
        p.check()
    profiles = set(profile_presets())
    assert {"cpu-tiny", "h100-qwen2.5-7b-tp4", "h100-qwen2.5-32b-tp8"} <= profiles
    for name in profiles:
        assert load_profile(name).name == name
    shipped = {"cpu-tiny", "fastrl-example-7b-8gpu", "fastrl-example-32b-128gpu"}
    assert shipped <= set(workload_presets())
    for name in workload_presets():
        w = load_workload(name)
        assert w.name == name
        assert load_profile(w.profile).name in profiles  # every workload names a loadable profile


def test_preset_semantics():
    assert not load_policy("baseline").uses_sd
    static, tlt, cold = load_policy("static-sd"), load_policy("tlt"), load_policy("tlt-cold")
    assert static.uses_sd and static.bandit.algorithm == "fixed"
    assert not static.spot_training.enabled
    # The paper's TLT: a warm-started drafter, FastRL's fixed tree strategies, spot training.
    assert tlt.uses_sd and tlt.drafter.warm_start and tlt.spot_training.enabled
    assert tlt.bandit.algorithm == "fixed"
    assert not all(row.strategy.is_chain for row in tlt.schedule)
    # The cold start: a drafter trained from scratch, n-gram while it is worse, BEG-MAB over chains.
    assert cold.uses_sd and cold.bandit.algorithm == "beg" and cold.spot_training.enabled
    assert cold.drafter.ngram_fallback
    assert not cold.drafter.warm_start and all(row.strategy.is_chain for row in cold.schedule)
    base = load_policy("tlt-base")
    assert base.drafter.kind == "ngram"
    assert (base.sd_threshold, base.sd_warmup_steps) == (tlt.sd_threshold, tlt.sd_warmup_steps)


def _custom_policy() -> Policy:
    return Policy(
        name="custom", description="round trip", sd_threshold=24,
        schedule=(ScheduleBucket(1, 4, 6), ScheduleBucket(5, 24, 3)),
        bandit=BanditConfig(algorithm="ucb1", arms=(0, 3, 6), epsilon=0.25, window=8,
                            decision_interval=16),
        drafter=DrafterConfig(kind="eagle", warm_start=True, ngram_fallback=True,
                              switch_margin=0.1),
        spot_training=SpotTraining(enabled=True, min_idle_workers=2, lr=3e-4, steps=500, buffer=3),
    )


@pytest.mark.parametrize("suffix", [".yaml", ".json", ".yml"])
@pytest.mark.parametrize("which",
                         ["custom", "baseline", "static-sd", "tlt", "tlt-cold", "tlt-base"])
def test_policy_round_trips(tmp_path, suffix, which):
    policy = _custom_policy() if which == "custom" else load_policy(which)
    path = tmp_path / f"policy{suffix}"
    save(policy, path)
    assert load_policy(path) == policy


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_workload_and_profile_round_trip(tmp_path, suffix):
    from workbench.contracts.profile import Profile
    from workbench.contracts.schema import from_mapping, read_mapping

    w = replace(load_workload("fastrl-example-7b-8gpu"), profile="cpu-tiny")
    save(w, tmp_path / f"w{suffix}")
    assert load_workload(tmp_path / f"w{suffix}") == w
    prof = load_profile("h100-qwen2.5-7b-tp4")
    save(prof, tmp_path / f"p{suffix}")
    assert from_mapping(Profile, read_mapping(tmp_path / f"p{suffix}")) == prof


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "policy.yaml"
    save(_custom_policy(), path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["policy.yaml"]
    save(load_policy("tlt"), path)  # overwrite
    assert sorted(p.name for p in path.parent.iterdir()) == ["policy.yaml"]
    assert load_policy(path) == load_policy("tlt")

    # A failure while replacing leaves the old file whole and no temp file behind.
    before = path.read_bytes()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        save(_custom_policy(), path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["policy.yaml"]


# --------------------------------------------------------------------------- speculation strategies


def test_strategies_parse_chains_and_trees():
    assert Strategy.parse(4) == Strategy.parse("4") == Strategy(4, 1, 5) == Strategy.chain(4)
    tree = Strategy.parse("8_4_48")
    got = (tree.steps, tree.topk, tree.verify_tokens, tree.depth, tree.name)
    assert got == (8, 4, 48, 8, "8_4_48")
    # FastRL's 8_4_8 verifies 8 positions: the root and 7 drafts, so the tree is 7 deep.
    assert Strategy.parse("8_4_8").depth == 7
    assert Strategy.chain(0).verify_tokens == 1 and Strategy.chain(0).depth == 0
    with pytest.raises(ValueError, match="steps_topk_tokens"):
        Strategy.parse("8_4")


def test_a_tree_schedule_loads_and_bad_trees_name_the_field(tmp_path):
    good = _with(GOOD_POLICY, "schedule", [[1, 1, "8_4_48"], [2, 4, "8_4_32"], [5, 32, 4]])
    good = _with(good, "bandit", {"algorithm": "fixed"})
    pol = load_policy(_write(tmp_path / "tree.yaml", good))
    assert [r.strategy.name for r in pol.schedule] == ["8_4_48", "8_4_32", "4"]
    assert pol.strategy_of(0) == Strategy(8, 4, 48)
    for rows, field, value in (([[1, 32, "8_4_500"]], "schedule[0].tokens", "500"),
                               ([[1, 32, "8_40_48"]], "schedule[0].topk", "40"),
                               ([[1, 32, 8448]], "schedule[0].draft_len", "8448")):
        path = _write(tmp_path / "bad.yaml", _with(_with(GOOD_POLICY, "schedule", rows), "bandit",
                                                   {"algorithm": "fixed"}))
        with pytest.raises(ConfigError) as exc:
            load_policy(path)
        _assert_clear(exc.value, path, field, value, "")
    # A learning bandit chooses among chain arms: a tree row would be silently unused.
    path = _write(tmp_path / "mixed.yaml", _with(GOOD_POLICY, "schedule", [[1, 32, "8_4_48"]]))
    with pytest.raises(ConfigError) as exc:
        load_policy(path)
    assert "schedule[0]" in str(exc.value) and "fixed" in str(exc.value)


def test_fastrl_rules_are_policy_fields(tmp_path):
    pol = load_policy("tlt")
    assert pol.sd_threshold == 32 and pol.sd_warmup_steps == 10
    assert pol.spot_training.interval_steps == 10
    assert [r.strategy.name for r in pol.schedule] == ["8_4_48", "8_4_32", "8_4_16", "8_4_8"]
    assert [(r.min_batch, r.max_batch) for r in pol.schedule] == [(1, 1), (2, 4), (5, 20), (21, 32)]
    for part, field, value in (("sd_warmup_steps", "sd_warmup_steps", -1),
                               ("spot_training", "spot_training.interval_steps",
                                {"interval_steps": 0}),
                               ("bandit", "bandit.reward_stat", {"reward_stat": "mode"})):
        path = _write(tmp_path / "bad.yaml", _with(GOOD_POLICY, part, value))
        with pytest.raises(ConfigError) as exc:
            load_policy(path)
        assert f"'{field}'" in str(exc.value), exc.value


def test_differences_compares_numbers_within_a_relative_tolerance():
    prof = load_profile("cpu-tiny")
    near = replace(prof,
                   decode=replace(prof.decode, overhead_s=prof.decode.overhead_s * (1 + 1e-5)))
    far = replace(prof, decode=replace(prof.decode, overhead_s=prof.decode.overhead_s * 1.01))
    renamed = replace(prof, name="other")
    assert differences(prof, near, rel_tol=1e-3) == []
    assert differences(prof, far, rel_tol=1e-3) == ["decode.overhead_s"]
    assert differences(prof, renamed, rel_tol=1e-3) == ["name"]
    assert differences({"a": [1.0, 2.0]}, {"a": [1.0]}, rel_tol=1e-3) == ["a"]
