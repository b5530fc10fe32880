"""The exported files handed to their targets' own parsers: SGLang's `ServerArgs` and veRL's
rollout config. Run by tests/workbench/test_export.py in a subprocess whose `sys.path` starts with
the parser packages' folder (`make parsers`: .parsers/, installed without their dependencies), so
that their pins (hydra-core's antlr4 4.9) never meet the product's environment (.venv's antlr4
4.13, which math-verify needs).

    python tests/workbench/export_parsers.py sglang|verl CASES.json

CASES.json: {"sglang": [{"policy": NAME, "args": [...]}], "verl": [{"policy": NAME, "text": ...}]}
(the test writes it from `tlt export`'s files). Prints one line per case checked; exits 1 naming
the case that fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import yaml


def check_sglang(cases: dict) -> int:
    """Every exported SGLang argument list parses with SGLang's own parser (the arguments shared
    with FastRL's fork where the installed SGLang is upstream's), and FastRL's MAB, where the
    fork is installed, picks the policy's strategy at every batch size that drafts."""
    from sglang.srt import server_args

    parser = argparse.ArgumentParser()
    server_args.ServerArgs.add_cli_args(parser)
    fastrl = any("apdative" in o for a in parser._actions for o in a.option_strings)
    for case in cases["sglang"]:
        args = case["args"]
        if fastrl and "--speculative-eagle-mab-configs" in args:
            _fastrl_plays_the_schedule(case["policy"], parser.parse_args(["--model-path", "m",
                                                                          *args]))
        if not fastrl:  # upstream SGLang: only the arguments it shares with FastRL's fork
            keep = [i for i in range(0, len(args), 2)
                    if "mab" not in args[i] and "apdative" not in args[i]]
            args = [x for i in keep for x in args[i:i + 2]]
        parsed = parser.parse_args(["--model-path", "m", *args])
        want = dict(zip(args[::2], args[1::2])).get("--speculative-algorithm")
        assert parsed.speculative_algorithm == want, (case["policy"], parsed.speculative_algorithm)
        print(f"sglang parses {case['policy']}: {' '.join(args) or '(no speculative arguments)'}")
    fields = {a.dest for a in parser._actions}
    for case in cases["verl"]:
        rollout = yaml.safe_load(case["text"])["actor_rollout_ref"]["rollout"]
        kwargs = rollout.get("engine_kwargs", {}).get("sglang", {})
        assert set(kwargs) <= fields, (case["policy"], set(kwargs) - fields)
    return len(cases["sglang"])


def _fastrl_plays_the_schedule(policy_name: str, a) -> None:
    """FastRL's own MAB (eagle_mab.py), built as its eagle_worker.py builds it from the parsed
    arguments, picks the policy's strategy at every batch size that drafts."""
    from sglang.srt.speculative.eagle_mab import BucketedEpsilonGreedyMAB

    from workbench.contracts.policy import load_policy

    policy = load_policy(policy_name)
    default = (
        f"{a.speculative_num_steps}_{a.speculative_eagle_topk}_{a.speculative_num_draft_tokens}"
    )
    mab = BucketedEpsilonGreedyMAB(strategies=sorted({default, *a.speculative_eagle_mab_configs}),
                                   window_size=a.speculative_mab_window_size,
                                   bs_threshold=a.speculative_mab_bs_threshold)
    for batch in range(1, a.apdative_speculative_batch_size_threshold + 1):
        s = policy.strategy_of(policy.bucket_of(batch))
        assert mab.select_strategy(batch) == f"{s.steps}_{s.topk}_{s.verify_tokens}", (
            policy.name, batch)


def check_verl(cases: dict) -> int:
    """Every exported veRL fragment merges into veRL's generated trainer config with unknown keys
    refused (as Hydra does) and builds veRL's own RolloutConfig."""
    import verl
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    base = OmegaConf.load(
        os.path.join(os.path.dirname(verl.__file__), "trainer/config/_generated_ppo_trainer.yaml"))
    OmegaConf.set_struct(base, True)
    # engine_kwargs are free-form.
    OmegaConf.set_struct(base.actor_rollout_ref.rollout.engine_kwargs, False)
    for case in cases["verl"]:
        merged = OmegaConf.merge(base, OmegaConf.create(yaml.safe_load(case["text"])))
        cfg = omega_conf_to_dataclass(merged.actor_rollout_ref.rollout)
        assert type(cfg).__name__ == "RolloutConfig", case["policy"]
        assert cfg.max_num_seqs == 256, case["policy"]
        print(f"verl builds {case['policy']}: rollout {cfg.name}, engine_kwargs "
              f"{sorted(merged.actor_rollout_ref.rollout.engine_kwargs)}")
    return len(cases["verl"])


def main() -> int:
    target, path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        cases = json.load(f)
    checked = {"sglang": check_sglang, "verl": check_verl}[target](cases)
    print(f"{target}: {checked} exported files checked by the target's own parser")
    return 0


if __name__ == "__main__":
    sys.exit(main())
