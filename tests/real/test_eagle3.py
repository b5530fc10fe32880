"""The EAGLE-3 head (real/drafter/eagle3.py) and the public layouts (real/drafter/checkpoint.py):
its training-time test is the chain vLLM's proposer drafts, the spot trainer continues a saved
head, and both public layouts round-trip.

Torch-only and fast: the random-weight tiny Qwen2 target of tests/conftest.py (2 layers), one torch
thread.
"""

from __future__ import annotations

import threading

import pytest

pytestmark = pytest.mark.needs_torch

AUX = (1, 0)  # the target layers the test head reads (any order vLLM would take)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def sequences(random_target):
    """Prompts of 4 random tokens and 24 greedy tokens of the target after each."""
    import torch

    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(3, 40, (16, 4), generator=gen)
    with torch.no_grad():
        for _ in range(24):
            nxt = random_target(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat((ids, nxt), dim=1)
    return ids.tolist()


def _head(target, sequences):
    import torch

    from real.drafter.eagle3 import Eagle3Drafter

    torch.manual_seed(0)
    used = sorted({t for s in sequences for t in s})
    return Eagle3Drafter.from_target(target, used, AUX)


def _brute_chain(head, ids, aux, t, j):
    """The draft logits vLLM's proposer computes at draft step j + 1 of a chain started at t that
    the record's own tokens follow: every position recomputed with causal attention."""
    import torch
    import torch.nn.functional as F

    from real.drafter.layers import rotated_qkv

    x, res = head.chain_input(ids[1: t + 2], aux[: t + 1])
    xs, rs, pos = [x], [res], list(range(t + 1))
    for m in range(j + 1):
        q, k, v = rotated_qkv(head.midlayer.self_attn, torch.cat(xs)[None], torch.tensor([pos]))
        out = head.chain_output(torch.cat(rs)[None], F.scaled_dot_product_attention(
            q, k, v, is_causal=True))[0, -1]
        if m == j:
            return head.draft_logits(out)
        xn, rn = head.chain_input(ids[t + 2 + m: t + 3 + m], out[None], first=False)
        xs, rs, pos = xs + [xn], rs + [rn], pos + [t + 1 + m]


def test_the_training_time_test_is_the_chain_vllm_drafts(random_target, sequences):
    """Step j of the unrolled head at position t equals draft step j + 1 of a chain started at t
    (its context's keys, then its own chain's), fed the record's tokens."""
    import torch

    from real.drafter.training import featurize_records

    head = _head(random_target, sequences).eval()
    rec = featurize_records(random_target, sequences[:1], aux_layers=AUX)[0]
    ids = torch.tensor(rec.token_ids)
    with torch.no_grad():
        ttt = head.ttt_logits(rec.aux[None], ids[None], 4)
        for t in (0, 5, 17):
            for j in range(4):
                want = _brute_chain(head, ids, rec.aux, t, j)
                assert torch.allclose(ttt[j][0, t], want, atol=1e-5), (t, j)


def test_the_spot_trainer_continues_a_saved_eagle3_head(random_target, sequences, tmp_path):
    import torch

    from real.drafter.checkpoint import load_drafter, save_drafter
    from real.drafter.eagle3 import Eagle3Drafter
    from real.drafter.spot import SpotTrainer, average_states

    head = _head(random_target, sequences)
    saved = save_drafter(head, tmp_path / "head", random_target.config)
    trainer = SpotTrainer(random_target, saved, lr=3e-3, seed=0)
    assert isinstance(trainer.drafter, Eagle3Drafter) and trainer.drafter.aux_layers == AUX
    records = trainer.hidden_records(sequences)
    assert records[0].aux.shape == (len(sequences[0]), 2 * 32)
    initial = trainer.drafter_state()
    before = trainer.estimate_accept_len(records, k=3)
    first = trainer.train_until(threading.Event(), records, max_steps=5)
    trainer.train_until(threading.Event(), records, max_steps=60)
    last = trainer.train_until(threading.Event(), records, max_steps=5)
    # the random target's next-token distributions are nearly flat: its entropy bounds the loss,
    # the argmax is what the head learns (and what greedy verification accepts)
    assert last.loss < first.loss and last.top1 > first.top1 + 0.2
    after = trainer.estimate_accept_len(records, k=3)
    print(f"accepted length {before:.2f} -> {after:.2f}, top-1 {first.top1:.2f} -> {last.top1:.2f}")
    assert after > before + 0.3
    static = trainer.static_drafter(initial)
    assert trainer.estimate_accept_len(records, k=3, drafter=static) == pytest.approx(before)
    # merging copies keeps the vocabulary maps exact (never averaged through floats)
    merged = average_states([trainer.drafter_state(), initial], [2.0, 1.0])
    assert torch.equal(merged["d2t"], initial["d2t"]) and merged["t2d"].dtype == torch.bool
    again = save_drafter(trainer.drafter, tmp_path / "trained", random_target.config)
    reloaded = load_drafter(again, random_target)
    assert all(torch.equal(v, reloaded.drafter_state_dict()[k])
               for k, v in trainer.drafter_state().items())


def test_the_public_eagle_layout_round_trips_with_its_own_embedding(random_target, tmp_path):
    """SafeAILab's layout (LlamaForCausalLM, pytorch_model.bin) loads back, and a head that ships
    an embedding keeps it as vLLM does (it is not swapped for the target's)."""
    import copy
    import json

    import torch

    from real.drafter.checkpoint import load_drafter, save_drafter
    from real.drafter.eagle import EagleDrafter

    torch.manual_seed(0)
    own = copy.deepcopy(random_target.get_input_embeddings())
    head = EagleDrafter.from_target(random_target)
    head = EagleDrafter(head.config, own, random_target.get_output_embeddings(), own_embed=True)
    path = save_drafter(head, tmp_path / "public", random_target.config, layout="public")
    assert json.loads((path / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert (path / "pytorch_model.bin").is_file() and not list(path.glob("*.safetensors"))
    back = load_drafter(path, random_target)
    assert back.own_embed and "embed_tokens.weight" in back.drafter_state_dict()
    assert all(torch.equal(v, back.drafter_state_dict()[k])
               for k, v in head.drafter_state_dict().items())
    updated = copy.deepcopy(random_target)
    with torch.no_grad():
        updated.get_input_embeddings().weight.mul_(2.0)
    back.share_target(updated)
    assert back.embed_tokens is not updated.get_input_embeddings()
    assert back.lm_head is updated.get_output_embeddings()
