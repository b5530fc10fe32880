"""`tlt export`: a policy for vLLM, SGLang / FastRL and veRL (workbench/deploy/export.py).

The exported names are checked against the targets' own argument names, recorded from their source:

- FastRL's SGLang fork: mit-han-lab/fastrl @ bce3df7a4d46473912e9b81bf47bca419729557f,
  third-party/sglang/python/sglang/srt/server_args.py (`ServerArgs.add_cli_args`: the option strings
  of the speculative group, FastRL's `--apdative-speculative-batch_size-threshold` and
  `--speculative-eagle-mab-*` / `--speculative-mab-*` included);
- FastRL's trainer: the same commit, verl/trainer/config/fastrl_trainer.yaml (`speculative:`), and
  verl/workers/rollout/sglang_rollout/sglang_rollout.py (how those keys become server arguments);
- upstream SGLang 0.5.23 (the PyPI wheel sglang-0.5.23), sglang/srt/server_args.py: `ServerArgs`
  fields (what veRL's `engine_kwargs.sglang` is passed to);
- veRL 0.9.1 (the PyPI wheel verl-0.9.1), verl/workers/config/rollout.py `RolloutConfig` fields and
  verl/trainer/config/rollout/rollout.yaml `engine_kwargs` (`vllm`, `sglang`, `trtllm`).

The last tests hand the exported files to SGLang's and veRL's own parsers, in a subprocess over
their own package folder (tests/workbench/export_parsers.py; `make parsers`); vLLM's own check is
tests/real/test_export_vllm.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from real.rollout.spec_config import speculative_config
from workbench.cli import app
from workbench.contracts.policy import (
    DrafterConfig,
    Policy,
    ScheduleBucket,
    load_policy,
    policy_presets,
)
from workbench.deploy.export import ExportError, export_policy

FASTRL_SERVER_ARGS = {
    "--apdative-speculative-batch_size-threshold",
    "--max-running-requests",
    "--speculative-accept-threshold-acc",
    "--speculative-accept-threshold-single",
    "--speculative-algorithm",
    "--speculative-attention-mode",
    "--speculative-draft-load-format",
    "--speculative-draft-model",
    "--speculative-draft-model-path",
    "--speculative-draft-model-revision",
    "--speculative-eagle-mab-algorithm",
    "--speculative-eagle-mab-configs",
    "--speculative-eagle-topk",
    "--speculative-mab-bs-threshold",
    "--speculative-mab-window-size",
    "--speculative-ngram-branch-length",
    "--speculative-ngram-capacity",
    "--speculative-ngram-match-type",
    "--speculative-ngram-max-bfs-breadth",
    "--speculative-ngram-max-match-window-size",
    "--speculative-ngram-min-bfs-breadth",
    "--speculative-ngram-min-match-window-size",
    "--speculative-num-draft-tokens",
    "--speculative-num-steps",
    "--speculative-token-map",
}
# eagle_mab.py MABGroupManager.ALGORITHM_FACTORIES.
FASTRL_MAB_ALGORITHMS = {"EG", "UCB1", "PREDEFINED", "BEG"}
FASTRL_TRAINER_KEYS = {
    "speculative.enable",
    "speculative.spec_strategy",
    "speculative.bs_threshold",
    "speculative.eagle.spec_model_path",
    "speculative.eagle.spec_steps",
    "speculative.eagle.spec_topk",
    "speculative.eagle.spec_verify_tokens",
    "speculative.eagle.tune_algorithm",
    "speculative.eagle.mab_configs",
    "speculative.eagle.mab_bs_threshold",
    "speculative.train.enable_drafter_training",
    "speculative.train.training_interval_steps",
    "speculative.train.batch_size_per_gpu",
    "speculative.train.max_seq_len",
    "speculative.train.max_epochs",
    "speculative.train.checkpoint_path",
    "speculative.train.min_workers_for_training",
    "speculative.train.collect_hidden_states_from_sgl",
    "speculative.train.optim.lr",
    "speculative.train.optim.lr_warmup_steps",
    "speculative.train.optim.min_lr_ratio",
    "speculative.train.optim.warmup_style",
}
UPSTREAM_SGLANG_FIELDS = {
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_num_steps",
    "speculative_ngram_min_bfs_breadth",
    "speculative_ngram_max_bfs_breadth",
}
VERL_ROLLOUT_FIELDS = {
    "name",
    "mode",
    "max_num_seqs",
    "max_model_len",
    "engine_kwargs",
    "n",
    "temperature",
}
VERL_ENGINE_KWARGS = {"vllm", "sglang", "trtllm"}

DRAFTER = "traces/reference/drafter"
REFERENCE_MODEL = Path(__file__).resolve().parents[2] / "traces" / "reference" / "model"


def _fake_drafter(tmp_path: Path) -> Path:
    """A copy of the shipped EAGLE checkpoint in a directory of its own (the export reads its
    config and tensor names; nothing loads it here)."""
    d = tmp_path / "drafter"
    if not d.exists():
        shutil.copytree(DRAFTER, d)
    return d


def _policy(rows, kind="eagle", threshold=32, name="p") -> Policy:
    pol = Policy(name=name, sd_threshold=threshold, drafter=DrafterConfig(kind=kind),
                 schedule=tuple(ScheduleBucket(**ScheduleBucket.from_row(r)) for r in rows))
    pol.check()
    return pol


def _sourced(text: str, tmp_path: Path, name: str) -> list[str]:
    """The items of bash array `name` in an exported SGLang file, as bash reads them."""
    f = tmp_path / "export.sh"
    f.write_text(text)
    res = subprocess.run(["bash", "-c", f'source "{f}"; printf "%s\\n" "${{{name}[@]}}"'],
                         capture_output=True, text=True, check=True)
    return [line for line in res.stdout.splitlines() if line]


def _options(args: list[str]) -> dict[str, str]:
    return dict(zip(args[::2], args[1::2]))


# --------------------------------------------------------------- vLLM: the engine's own translation


@pytest.mark.parametrize("name", ["tlt-vllm", "static-sd", "tlt-base", "tlt-cold"])
def test_the_vllm_export_is_the_engines_translation(name, tmp_path):
    pol, ddir = load_policy(name), _fake_drafter(tmp_path)
    exp = export_policy(pol, "vllm", ddir, 64)
    doc = yaml.safe_load(exp.text)
    assert doc["max-num-seqs"] == 64
    assert doc["speculative-config"] == speculative_config(pol, ddir.resolve(), 64, adaptive=False)
    assert all(line.startswith("#") for line in exp.text.split("max-num-seqs")[0].splitlines())


def test_vllm_refuses_trees_and_notes_what_it_drops(tmp_path):
    with pytest.raises(ExportError, match=r"schedule\[0\].*8_4_48.*--to sglang"):
        export_policy(load_policy("tlt"), "vllm", _fake_drafter(tmp_path))
    exp = export_policy(load_policy("tlt-vllm"), "vllm", _fake_drafter(tmp_path))
    kinds = [n.split(":")[0] for n in exp.notes]
    # What was checked of the drafter and what was not (no target model given); the bandit;
    # n-gram fallback; spot training.
    assert kinds == [f"drafter {_fake_drafter(tmp_path)}", "not checked", "approximated",
                     "dropped", "dropped"]
    assert all(f"#   - {n}" in exp.text for n in exp.notes)
    plain = yaml.safe_load(export_policy(load_policy("baseline"), "vllm").text)
    assert plain == {"max-num-seqs": 256}


# ---------------------------------------------------------------- SGLang / FastRL


def test_the_tlt_preset_becomes_fastrls_own_launch(tmp_path):
    """tlt is FastRL's defaults (fastrl_trainer.yaml, examples/grpo_7B.sh): the export gives them
    back."""
    ddir = _fake_drafter(tmp_path)
    exp = export_policy(load_policy("tlt"), "sglang", ddir)
    args = _sourced(exp.text, tmp_path, "SGLANG_ARGS")
    opts = _options(args)
    assert opts == {
        "--speculative-algorithm": "EAGLE",
        "--speculative-draft-model-path": str(ddir.resolve()),
        "--speculative-num-steps": "8",
        "--speculative-eagle-topk": "4",
        "--speculative-num-draft-tokens": "48",
        "--apdative-speculative-batch_size-threshold": "32",
        "--speculative-eagle-mab-algorithm": "BEG",
        "--speculative-eagle-mab-configs": "8_4_32,8_4_16,8_4_8",
        "--speculative-mab-bs-threshold": "1,2,5,21",
    }
    over = dict(o.split("=", 1) for o in _sourced(exp.text, tmp_path, "FASTRL_OVERRIDES"))
    assert (
        over["speculative.bs_threshold"] == "32"
        and over["speculative.eagle.spec_verify_tokens"] == "48"
    )
    assert json.loads(over["speculative.eagle.mab_configs"]) == ["8_4_32", "8_4_16", "8_4_8"]
    assert over["speculative.eagle.mab_bs_threshold"] == "[1,2,5,21]"
    assert (
        over["speculative.train.training_interval_steps"] == "10"
        and over["speculative.train.optim.lr"] == "1e-06"
    )
    # sd_warmup_steps 10 is FastRL's hard-coded warm-up: nothing approximated there.
    assert not any("sd_warmup_steps" in n for n in exp.notes)


def test_chains_trailing_zeros_and_warmup_in_fastrl(tmp_path):
    exp = export_policy(load_policy("tlt-vllm"), "sglang", _fake_drafter(tmp_path))
    opts = _options(_sourced(exp.text, tmp_path, "SGLANG_ARGS"))
    # [2,2,4] and [3,4,4] merge; the 0 row above 16 becomes the threshold.
    assert opts["--speculative-eagle-mab-configs"] == "4_1_5,3_1_4,2_1_3"
    assert opts["--speculative-mab-bs-threshold"] == "1,2,5,9"
    assert opts["--apdative-speculative-batch_size-threshold"] == "16"
    assert any(n.startswith("approximated: sd_warmup_steps 0") for n in exp.notes)
    assert any(n.startswith("approximated: bandit.algorithm 'climb'") for n in exp.notes)


@pytest.mark.parametrize(
    "rows, match",
    [
        (
            [[1, 4, 4], [5, 8, 0], [9, 32, 2]],
            r"\[5, 8, 0\] turns SD off between batch sizes that draft",
        ),
        ([[1, 4, "8_4_16"], [5, 32, "8_4_32"]], r"fewer verified tokens"),
    ],
)
def test_fastrl_refuses_what_its_mab_cannot_bucket(rows, match, tmp_path):
    with pytest.raises(ExportError, match=match):
        export_policy(_policy(rows), "sglang", _fake_drafter(tmp_path))


def test_ngram_and_suffix_in_sglang(tmp_path):
    exp = export_policy(load_policy("tlt-base"), "sglang")
    opts = _options(_sourced(exp.text, tmp_path, "SGLANG_ARGS"))
    assert (
        opts["--speculative-algorithm"] == "NGRAM" and opts["--speculative-num-draft-tokens"] == "8"
    )
    assert _sourced(exp.text, tmp_path, "FASTRL_OVERRIDES") == []
    assert any(n.startswith("approximated: SGLang's NGRAM worker") for n in exp.notes)
    with pytest.raises(ExportError, match="suffix"):
        export_policy(load_policy("history-sd"), "sglang")


# ---------------------------------------------------------------- veRL


def test_verl_fragments(tmp_path):
    ddir = _fake_drafter(tmp_path)
    chain = yaml.safe_load(export_policy(load_policy("static-sd"), "verl", ddir, 64).text)
    rollout = chain["actor_rollout_ref"]["rollout"]
    assert rollout["name"] == "vllm" and rollout["max_num_seqs"] == 64
    assert rollout["engine_kwargs"]["vllm"]["speculative_config"] == speculative_config(
        load_policy("static-sd"), ddir.resolve(), 64)
    tree = export_policy(load_policy("tlt"), "verl", ddir)
    sg = yaml.safe_load(tree.text)["actor_rollout_ref"]["rollout"]
    assert (
        sg["name"] == "sglang"
        and sg["engine_kwargs"]["sglang"]["speculative_num_draft_tokens"] == 8
    )
    assert any(n.startswith("approximated: upstream SGLang") for n in tree.notes)


# ---------------------------------------------------------------- names the targets know


def _exportable(target: str, tmp_path: Path):
    for name in policy_presets():
        try:
            yield name, export_policy(load_policy(name), target, _fake_drafter(tmp_path))
        except ExportError:
            continue


def test_every_exported_name_is_one_the_target_knows(tmp_path):
    seen = 0
    for name, exp in _exportable("sglang", tmp_path):
        args = _sourced(exp.text, tmp_path, "SGLANG_ARGS")
        assert set(args[::2]) <= FASTRL_SERVER_ARGS, name
        assert (
            _options(args).get("--speculative-eagle-mab-algorithm", "BEG") in FASTRL_MAB_ALGORITHMS
        )
        keys = {o.split("=", 1)[0] for o in _sourced(exp.text, tmp_path, "FASTRL_OVERRIDES")}
        assert keys <= FASTRL_TRAINER_KEYS, (name, keys - FASTRL_TRAINER_KEYS)
        seen += 1
    for name, exp in _exportable("verl", tmp_path):
        rollout = yaml.safe_load(exp.text)["actor_rollout_ref"]["rollout"]
        assert (
            set(rollout) <= VERL_ROLLOUT_FIELDS
            and set(rollout.get("engine_kwargs", {})) <= VERL_ENGINE_KWARGS
        )
        assert set(rollout.get("engine_kwargs", {}).get("sglang", {})) <= UPSTREAM_SGLANG_FIELDS, (
            name
        )
        seen += 1
    assert seen >= 16


def test_the_cli_writes_notes_and_refuses_before_writing(tmp_path):
    runner = CliRunner()
    out = tmp_path / "tlt.sglang.sh"
    res = runner.invoke(
        app, ["export", "tlt", "--to", "sglang", "--drafter", DRAFTER, "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "note: dropped: spot_training.steps 200" in res.stderr and out.is_file()
    for argv, msg in [(["tlt", "--to", "vllm", "--drafter", DRAFTER], "tree strategy 8_4_48"),
                      (["static-sd", "--to", "vllm"], "--drafter"),
                      (["tlt-vllm", "--to", "trtllm", "--drafter", DRAFTER], "--to 'trtllm'"),
                      (["no-such-policy", "--to", "vllm"], "no-such-policy")]:
        bad = tmp_path / "bad.yaml"
        res = runner.invoke(app, ["export", *argv, "--out", str(bad)])
        assert res.exit_code == 2 and msg in res.stderr and not bad.exists(), (argv, res.stderr)
    res = runner.invoke(app, ["export", "static-sd", "--to", "vllm", "--drafter", DRAFTER, "--out",
                              str(tmp_path / "x.json")])
    assert res.exit_code == 2 and ".yaml" in res.stderr


# ---------------------------------------------------------- drafters as users name them


@pytest.mark.needs_reference
def test_export_takes_hub_ids_and_public_layouts(tmp_path, hub_cache, public_drafters):
    """A hub id in the local cache is checked against the model and written as the id; one not in
    the cache is written as it is, with a note; SafeAILab's layout and an EAGLE-3 head give
    vLLM's method for them (and SGLang's algorithm)."""
    hub_cache({"me/tiny-model": REFERENCE_MODEL, "me/tiny-EAGLE3": public_drafters["eagle3"]})
    runner = CliRunner()
    cases = [("me/tiny-EAGLE3", "eagle3", "match me/tiny-model"),
             ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "eagle3", "not in this machine's Hugging"),
             (str(public_drafters["eagle-public"]), "eagle", "LlamaForCausalLM (vLLM "
                                                           "EagleLlamaForCausalLM)")]
    for drafter, method, said in cases:
        out = tmp_path / "x.vllm.yaml"
        res = runner.invoke(app, ["export", "tlt-vllm", "--to", "vllm", "--drafter", drafter,
                                  "--model", "me/tiny-model", "--out", str(out)])
        assert res.exit_code == 0, res.stderr
        spec = yaml.safe_load(out.read_text())["speculative-config"]
        model = drafter if "/" in drafter and not Path(drafter).exists() else str(
            Path(drafter).resolve())
        assert (spec["method"], spec["model"]) == (method, model)
        assert said in out.read_text() and said in res.stderr
    sh = tmp_path / "x.sglang.sh"
    res = runner.invoke(app, ["export", "tlt", "--to", "sglang", "--drafter", "me/tiny-EAGLE3",
                              "--out", str(sh)])
    assert res.exit_code == 0 and "--speculative-algorithm EAGLE3" in sh.read_text()
    assert "speculative.train.enable_drafter_training=false" in sh.read_text()


@pytest.mark.needs_reference
def test_export_refuses_a_drafter_that_does_not_fit_its_model(tmp_path, public_drafters):
    bad = tmp_path / "head"
    shutil.copytree(public_drafters["eagle3"], bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "vocab_size": 151936}))
    out = tmp_path / "x.vllm.yaml"
    res = CliRunner().invoke(app, ["export", "tlt-vllm", "--to", "vllm", "--drafter", str(bad),
                                   "--model", str(REFERENCE_MODEL), "--out", str(out)])
    assert res.exit_code == 2 and not out.exists()
    assert f"--drafter {bad}: vocabulary 151936 (config.json vocab_size)" in res.stderr


# ---------------------------------------------------------- the targets' own parsers

# `make parsers` installs SGLang and veRL into their own folder, without their dependencies (CUDA
# builds) and away from .venv (hydra-core's antlr4 4.9 against math-verify's 4.13); `make test`
# makes it first and sets TLT_REQUIRE_PARSERS, so these never skip there.
PARSERS = Path(os.environ.get("TLT_PARSERS", Path(__file__).resolve().parents[2] / ".parsers"))
PARSER_CHECKS = Path(__file__).with_name("export_parsers.py")


def _parser_cases(tmp_path: Path) -> Path:
    """Every preset exported to SGLang and veRL (with the shipped drafter), and the tlt preset
    with an EAGLE-3 hub id, as the parser checks read them."""
    cases: dict[str, list] = {"sglang": [], "verl": []}
    for name, exp in _exportable("sglang", tmp_path):
        args = _sourced(exp.text, tmp_path, "SGLANG_ARGS")
        cases["sglang"].append({"policy": name, "args": args})
    for name, exp in _exportable("verl", tmp_path):
        cases["verl"].append({"policy": name, "text": exp.text})
    for target in ("sglang", "verl"):
        exp = export_policy(load_policy("tlt"), target, "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
        case = {"policy": "tlt"}
        case.update({"args": _sourced(exp.text, tmp_path, "SGLANG_ARGS")} if target == "sglang"
                    else {"text": exp.text})
        cases[target].append(case)
    out = tmp_path / "cases.json"
    out.write_text(json.dumps(cases))
    return out


def _run_parsers(target: str, tmp_path: Path) -> str:
    if not (PARSERS / ".installed").is_file():
        if os.environ.get("TLT_REQUIRE_PARSERS"):
            pytest.fail(f"{PARSERS} is not installed: `make parsers` installs it")
        pytest.skip(f"the parser packages are not installed in {PARSERS} (`make parsers`)")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PARSERS), str(root)])}
    res = subprocess.run([sys.executable, str(PARSER_CHECKS), target,
                          str(_parser_cases(tmp_path))], capture_output=True, text=True, env=env,
                         timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    return res.stdout


def test_sglang_parses_the_exported_arguments(tmp_path):
    out = _run_parsers("sglang", tmp_path)
    assert "sglang parses tlt: --speculative-algorithm EAGLE3" in out
    assert "sglang parses tlt: --speculative-algorithm EAGLE " in out


def test_verl_builds_its_rollout_config_from_the_fragment(tmp_path):
    out = _run_parsers("verl", tmp_path)
    assert "verl builds static-sd: rollout vllm" in out and "verl builds tlt: rollout sglang" in out


def test_the_parser_packages_stay_out_of_the_products_environment():
    """hydra-core (veRL) wants antlr4 4.9, math-verify (`--reward math`) 4.13: .venv keeps its
    own."""
    from importlib.metadata import version

    if importlib.util.find_spec("latex2sympy2_extended") is None:
        pytest.skip("math-verify is not installed")
    assert version("antlr4-python3-runtime").startswith("4.13")
    assert importlib.util.find_spec("verl") is None and importlib.util.find_spec("sglang") is None
