"""GRPO on a transformers causal LM (real/grpo.py), on a random-weight tiny Qwen2 saved once per
module."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.needs_torch  # real.grpo imports torch

VOCAB = 40


def test_group_advantages_normalise_per_group():
    from real.grpo import group_advantages

    rewards = [1.0, 0.0, 0.0, 0.0, 0.5, 2.0, 3.5, 0.1, 0.1, 0.1, 7.0]
    groups = [0, 0, 0, 0, 5, 5, 5, 2, 2, 2, 9]  # groups need not be contiguous or numbered from 0
    adv = group_advantages(rewards, groups)
    for g in (0, 5):
        a = [x for x, gg in zip(adv, groups) if gg == g]
        mean = sum(a) / len(a)
        assert abs(mean) < 1e-9
        assert math.sqrt(sum((x - mean) ** 2 for x in a) / (len(a) - 1)) == pytest.approx(
            1.0, abs=1e-5
        )
    assert adv[0] > 0 and all(x < 0 for x in adv[1:4]) and adv[4] < adv[5] < adv[6]
    # equal rewards (0.1's mean is not exactly 0.1) and a lone sample
    assert adv[7:] == [0.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        group_advantages([1.0], [0, 1])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random-weight tiny Qwen2 directory, with a tokenizer-like file that save() must carry
    over."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2,
                      intermediate_size=64, max_position_embeddings=256, tie_word_embeddings=False)
    out = tmp_path_factory.mktemp("grpo") / "model"
    Qwen2ForCausalLM(cfg).save_pretrained(str(out))
    (out / "tokenizer_config.json").write_text('{"marker": "copied"}\n')
    return out


def _responses(rewards_by_group, prompt_len=5, resp_len=7, offset=0):
    """Distinct prompts per group and distinct responses per sample (of uneven lengths: padding)."""
    from real.grpo import ScoredResponse

    out = []
    for g, rewards in enumerate(rewards_by_group):
        prompt = [1] + [(3 * g + j + offset) % (VOCAB - 3) + 3 for j in range(prompt_len - 1)]
        for k, r in enumerate(rewards):
            resp = [
                (5 * k + 7 * g + 2 * j + offset) % (VOCAB - 3) + 3 for j in range(resp_len + k % 3)
            ]
            out.append(ScoredResponse(prompt_ids=prompt, response_ids=resp, reward=r, group=g))
    return out


def _seq_logprobs(model, responses):
    import torch

    from real.grpo import response_logprobs

    with torch.no_grad():
        lps = response_logprobs(model, [r.prompt_ids + r.response_ids for r in responses],
                                [len(r.prompt_ids) for r in responses])
    return [float(x.sum()) for x in lps]


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_step_raises_the_rewarded_response_and_lowers_the_others(model_dir):
    from real.grpo import GRPOConfig, GRPOTrainer

    tr = GRPOTrainer(model_dir, GRPOConfig(lr=1e-3, minibatch=4), seed=0, threads=1)
    responses = _responses([[1.0, 0.0, 0.0, 0.0]])
    before = _seq_logprobs(tr.model, responses)
    for _ in range(3):
        stats, _ = tr.step(responses, keep_hidden=False)
        assert stats.sequences == 4 and stats.tokens == sum(len(r.response_ids) for r in responses)
        assert (
            math.isfinite(stats.loss)
            and stats.grad_norm > 0
            and stats.kl == 0.0
            and 0 <= stats.clip_frac <= 1
        )
    after = _seq_logprobs(tr.model, responses)
    assert after[0] > before[0] + 0.1
    assert all(a < b for a, b in zip(after[1:], before[1:]))
    # unbiased group std, population std reported
    assert stats.adv_std == pytest.approx(math.sqrt(3 / 4), rel=1e-4)


def test_hidden_states_are_the_pre_update_final_norm_output(model_dir):
    import torch

    from real.grpo import GRPOConfig, GRPOTrainer

    tr = GRPOTrainer(model_dir, GRPOConfig(lr=1e-2, minibatch=3), seed=0, threads=1)
    responses = _responses([[1.0, 0.0, 0.5], [0.0, 1.0]])
    with torch.no_grad():
        want = [
            tr.model.model(torch.tensor([r.prompt_ids + r.response_ids])).last_hidden_state[0]
            for r in responses
        ]
    stats, records = tr.step(responses)
    assert stats.ratio_mean == pytest.approx(1.0, abs=0.5)
    assert len(records) == len(responses)
    for r, rec, w in zip(responses, records, want):
        assert rec.token_ids == r.prompt_ids + r.response_ids
        assert rec.hidden.shape == (len(rec.token_ids), 32) and rec.hidden.dtype == torch.float32
        assert not rec.hidden.requires_grad and rec.hidden.device.type == "cpu"
        assert torch.allclose(rec.hidden, w, atol=1e-5)
    with torch.no_grad():  # the weights did move: the records are not recomputed afterwards
        now = tr.model.model(torch.tensor([records[0].token_ids])).last_hidden_state[0]
    assert not torch.allclose(now, records[0].hidden, atol=1e-5)


@pytest.mark.parametrize("pack", [True, False])
def test_an_eagle3_runs_records_carry_the_layers_its_head_reads(model_dir, pack):
    """With `drafter_layers` (an EAGLE-3 head's), each record also holds the residual streams
    entering those layers, from the same pre-update forward, in their order."""
    import torch

    from real.grpo import GRPOConfig, GRPOTrainer

    tr = GRPOTrainer(model_dir, GRPOConfig(minibatch=3, pack=pack, drafter_layers=(1, 0)),
                     seed=0, threads=1)
    responses = _responses([[1.0, 0.0, 0.5]])
    with torch.no_grad():
        outs = [tr.model(input_ids=torch.tensor([r.prompt_ids + r.response_ids]),
                         output_hidden_states=True).hidden_states for r in responses]
    _, records = tr.step(responses)
    for rec, hs in zip(records, outs):
        assert torch.allclose(rec.hidden, hs[-1][0], atol=1e-5)
        assert rec.aux.shape == (len(rec.token_ids), 64)
        assert torch.allclose(rec.aux, torch.cat([hs[1][0], hs[0][0]], -1), atol=1e-5)
    _, plain = GRPOTrainer(model_dir, GRPOConfig(minibatch=3), seed=0, threads=1).step(responses)
    assert all(r.aux is None for r in plain)


def test_same_seed_same_weights(model_dir):
    import torch

    from real.grpo import GRPOConfig, GRPOTrainer

    cfg = GRPOConfig(lr=1e-3, minibatch=2, epochs=2)
    responses = _responses([[1.0, 0.0, 0.0], [0.2, 0.9, 0.4]])
    runs = []
    for _ in range(2):
        tr = GRPOTrainer(model_dir, cfg, seed=7, threads=1)
        for _ in range(2):
            tr.step(responses, keep_hidden=False)
        runs.append(_weights(tr.model))
    a, b = runs
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_save_and_resume_equal_an_uninterrupted_run(model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from real.grpo import GRPOConfig, GRPOTrainer

    cfg = GRPOConfig(lr=1e-3, minibatch=2)
    r1, r2 = (
        _responses([[1.0, 0.0, 0.0], [0.0, 0.3, 1.0]]),
        _responses([[0.0, 1.0], [1.0, 0.0, 0.5]], offset=4),
    )
    a = GRPOTrainer(model_dir, cfg, seed=3, threads=1)
    a.step(r1, keep_hidden=False)
    saved = a.save(tmp_path / "ckpt")
    state = a.state_dict()
    w1 = _weights(a.model)
    rng_after_r1 = torch.get_rng_state()
    # must not leak into `state` (the optimiser's moments change in place)
    a.step(r2, keep_hidden=False)

    assert sorted(p.name for p in saved.iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer_config.json",
    ]
    assert (saved / "tokenizer_config.json").read_text() == '{"marker": "copied"}\n'
    assert not list(tmp_path.glob(".ckpt.*"))  # written through a temp dir, renamed away
    loaded = AutoModelForCausalLM.from_pretrained(str(saved), dtype=torch.float32)
    assert all(torch.equal(v, w1[k]) for k, v in loaded.state_dict().items())
    assert not all(
        torch.equal(w1[k], v) for k, v in _weights(GRPOTrainer(model_dir, cfg).model).items()
    )

    b = GRPOTrainer(saved, cfg, seed=3, threads=1)
    # the resumed trainer puts torch's generator back where the run left it
    torch.manual_seed(12345)
    b.load_state_dict(state)
    assert torch.equal(torch.get_rng_state(), rng_after_r1)
    b.step(r2, keep_hidden=False)
    wa, wb = _weights(a.model), _weights(b.model)
    assert all(torch.allclose(wa[k], wb[k], atol=1e-7) for k in wa)


def test_kl_to_the_reference(model_dir):
    from real.grpo import GRPOConfig, GRPOTrainer

    tr = GRPOTrainer(model_dir, GRPOConfig(lr=1e-3, minibatch=2, kl_coef=0.1), seed=0, threads=1)
    assert tr.reference is not None and not any(p.requires_grad for p in tr.reference.parameters())
    responses = _responses([[1.0, 0.0, 0.0]])
    first, _ = tr.step(responses, keep_hidden=False)
    second, _ = tr.step(responses, keep_hidden=False)
    assert first.kl >= 0 and second.kl > 0 and math.isfinite(second.loss)
    assert GRPOTrainer(model_dir, GRPOConfig()).reference is None  # no KL term: no second model


@pytest.fixture(scope="module")
def other_model_dir(tmp_path_factory, model_dir):
    """Another random tiny Qwen2 of the same shape: a reference the policy differs from (KL > 0)."""
    import torch
    from transformers import AutoConfig, Qwen2ForCausalLM

    torch.manual_seed(1)
    out = tmp_path_factory.mktemp("grpo-ref") / "model"
    Qwen2ForCausalLM(AutoConfig.from_pretrained(str(model_dir))).save_pretrained(str(out))
    return out


def _long_tailed(n_groups=3, group=4, seed=0):
    """Groups of responses whose lengths span 1 to 90 tokens, with distinct rewards."""
    import random

    from real.grpo import ScoredResponse

    rng = random.Random(seed)
    out = []
    for g in range(n_groups):
        prompt = [1] + [rng.randrange(3, VOCAB) for _ in range(rng.randrange(2, 9))]
        for _ in range(group):
            n = rng.choice([1, 3, 7, 12, 20, 35, 90])
            out.append(
                ScoredResponse(prompt, [rng.randrange(3, VOCAB) for _ in range(n)], rng.random(), g)
            )
    return out


def test_packed_and_padded_updates_give_the_same_loss_and_gradients(model_dir, other_model_dir):
    """Packing (several micro-batches per minibatch here) changes the work, not the optimisation:
    the same loss, gradients, statistics and hidden states as one right-padded forward per
    minibatch."""
    import torch

    from real.grpo import GRPOConfig, GRPOTrainer

    responses = _long_tailed()
    trainers = {
        pack: GRPOTrainer(
            model_dir,
            GRPOConfig(lr=3e-3, minibatch=5, epochs=2, kl_coef=0.1, pack=pack, micro_tokens=60),
            seed=4,
            reference_dir=other_model_dir,
            threads=1,
        )
        for pack in (True, False)
    }
    (loss_p, grads_p), (loss_q, grads_q) = (trainers[p].gradients(responses) for p in (True, False))
    assert loss_p == pytest.approx(loss_q, rel=1e-5, abs=1e-7) and loss_p != 0.0
    assert grads_p.keys() == grads_q.keys() and len(grads_p) > 10
    for k in grads_p:
        assert torch.allclose(grads_p[k], grads_q[k], rtol=1e-4, atol=1e-6), k
    (sp, rp), (sq, rq) = (trainers[p].step(responses) for p in (True, False))
    for field in ("loss", "kl", "ratio_mean", "clip_frac", "grad_norm"):
        assert getattr(sp, field) == pytest.approx(getattr(sq, field), rel=1e-4, abs=1e-6), field
    assert (
        sp.kl > 0
        and sp.ratio_mean != 1.0
        and (sp.tokens, sp.sequences) == (sq.tokens, sq.sequences)
    )
    assert [r.token_ids for r in rp] == [r.token_ids for r in rq]
    assert all(torch.allclose(a.hidden, b.hidden, atol=1e-5) for a, b in zip(rp, rq))
    wp, wq = _weights(trainers[True].model), _weights(trainers[False].model)
    # Adam divides by the gradient's running RMS: where that is near 0, rounding-level gradient
    # differences move a weight by up to ~1e-5 here (6 updates of lr 3e-3 move them by ~1e-2).
    assert all(torch.allclose(wp[k], wq[k], atol=1e-4) for k in wp)


def test_padded_micro_batches_accumulate_to_the_minibatchs_gradients(model_dir):
    """Padded forwards of 2 sequences at a time (veRL's micro-batches, for memory) give one
    5-sequence minibatch's loss and gradients."""
    import torch

    from real.grpo import GRPOConfig, GRPOTrainer

    responses = _long_tailed(seed=3)
    trainers = [GRPOTrainer(model_dir, GRPOConfig(minibatch=5, pack=False, micro_batch=m), seed=2,
                            threads=1)
                for m in (0, 2)]
    (loss_a, grads_a), (loss_b, grads_b) = (t.gradients(responses) for t in trainers)
    assert loss_a == pytest.approx(loss_b, rel=1e-5, abs=1e-7) and loss_a != 0.0
    assert all(torch.allclose(grads_a[k], grads_b[k], rtol=1e-4, atol=1e-6) for k in grads_a)
    with pytest.raises(ValueError, match="micro_batch >= 0"):
        GRPOTrainer(model_dir, GRPOConfig(micro_batch=-1))


def test_packed_forward_keeps_sequences_apart(model_dir):
    """A sequence's log-probs do not depend on what it is packed with (attention stays within
    it)."""
    import torch

    from real.grpo import GRPOTrainer
    from real.packing import packed_forward, token_chunks

    tr = GRPOTrainer(model_dir, threads=1)
    rs = _long_tailed(seed=5)[:6]
    seqs, plens = [r.prompt_ids + r.response_ids for r in rs], [len(r.prompt_ids) for r in rs]
    with torch.no_grad():
        together, hidden = packed_forward(tr.model, seqs, plens, hidden=True)
        alone = [packed_forward(tr.model, [s], [p])[0][0] for s, p in zip(seqs, plens)]
        direct = [tr.model.model(torch.tensor([s])).last_hidden_state[0] for s in seqs]
    for a, b, h, d, r in zip(together, alone, hidden, direct, rs):
        assert a.shape == (len(r.response_ids),) and torch.allclose(a, b, atol=1e-5)
        assert torch.allclose(h, d, atol=1e-5)
    assert token_chunks([5, 5, 20, 3, 3], 10) == [[0, 1], [2], [3, 4]]
    with pytest.raises(ValueError, match="prompt length"):
        packed_forward(tr.model, [[1, 2]], [0])
