"""Spot drafter training (real/drafter/spot.py).

Torch-only and fast: a random-weight tiny Qwen2 target (tests/conftest.py's `random_target`),
one torch thread.
"""

from __future__ import annotations

import json
import math
import threading

import pytest

pytestmark = pytest.mark.needs_torch


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def greedy_sequences(random_target):
    """Prompts of 4 random tokens and 28 greedy tokens of the target after each."""
    import torch

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 40, (24, 4), generator=gen)
    with torch.no_grad():
        for _ in range(28):
            nxt = random_target(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat((ids, nxt), dim=1)
    return ids.tolist()


@pytest.fixture(scope="module")
def records(random_target, greedy_sequences):
    from real.drafter.spot import SpotTrainer

    return SpotTrainer(random_target).hidden_records(greedy_sequences)


# ---------------------------------------------------------------- the buffer


def test_buffer_keeps_the_last_rl_steps():
    from real.drafter.records import HiddenRecord
    from real.drafter.spot import DrafterBuffer

    buf = DrafterBuffer(max_steps=2)
    # The buffer reads token_ids only.
    rec = lambda n: HiddenRecord(list(range(n)), None)  # noqa: E731
    lengths = lambda: [len(r.token_ids) for r in buf.records()]  # noqa: E731
    buf.add(1, [rec(3)])
    buf.add(2, [rec(4), rec(5)])
    buf.add(2, [rec(6)])  # a second worker's records of the same step
    assert buf.steps() == [2, 1] and lengths() == [4, 5, 6, 3]
    buf.add(3, [rec(7)])
    assert buf.steps() == [3, 2] and lengths() == [7, 4, 5, 6]
    buf.add(1, [rec(8)])  # older than all held: dropped at once
    assert buf.steps() == [3, 2] and sum(lengths()) == 22
    with pytest.raises(ValueError):
        DrafterBuffer(0)


# ---------------------------------------------------------------- training


def test_hidden_records_are_the_target_final_norm_states(random_target, records, greedy_sequences):
    import torch

    assert len(records) == len(greedy_sequences)
    r = records[0]
    assert (
        r.token_ids == greedy_sequences[0]
        and r.hidden.shape == (32, 32)
        and r.hidden.dtype == torch.float32
    )
    with torch.no_grad():
        last = random_target.model(torch.tensor([r.token_ids])).last_hidden_state[0]
    assert torch.allclose(r.hidden, last, atol=1e-5)


def test_stop_set_before_the_call_means_no_step(random_target, records):
    from real.drafter.spot import SpotTrainer

    trainer = SpotTrainer(random_target)
    stop = threading.Event()
    stop.set()
    res = trainer.train_until(stop, records)
    assert res.steps == 0 and res.stopped and trainer.steps == 0
    res = trainer.train_until(threading.Event(), [], max_steps=5)  # no data: returns at once
    assert res.steps == 0 and not res.stopped


def test_stop_from_another_thread_ends_after_the_step_in_flight(
    random_target, records, monkeypatch
):
    """The stop is set by another thread while step 4 runs: step 4 completes, no step 5 starts."""
    import real.drafter.spot as spot

    trainer = spot.SpotTrainer(random_target)
    stop, in_step_4 = threading.Event(), threading.Event()
    calls = []
    real_step = spot.train_records

    def step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            in_step_4.set()
            assert stop.wait(10)  # the other thread has set it, mid-step
        return real_step(*args, **kwargs)

    monkeypatch.setattr(spot, "train_records", step)
    setter = threading.Thread(target=lambda: (in_step_4.wait(10), stop.set()))
    setter.start()
    res = trainer.train_until(stop, records)
    setter.join()
    assert res.stopped and res.steps == 4 and len(calls) == 4 and trainer.steps == 4
    res = trainer.train_until(threading.Event(), records, max_steps=3)
    assert res.steps == 3 and not res.stopped and trainer.steps == 7


def test_training_lowers_the_loss_and_raises_acceptance(random_target, records):
    from real.drafter.spot import SpotTrainer

    held_out, train = records[:4], records[4:]
    trainer = SpotTrainer(random_target, lr=3e-3, seed=0)
    untrained = trainer.estimate_accept_len(held_out, k=3)
    first = trainer.train_until(threading.Event(), train, max_steps=3)
    trainer.train_until(threading.Event(), train, max_steps=60)
    last = trainer.train_until(threading.Event(), train, max_steps=5)
    assert last.loss < 0.8 * first.loss and last.top1 > first.top1 + 0.2
    trained = trainer.estimate_accept_len(held_out, k=3)
    assert 1.0 <= untrained < trained <= 4.0
    assert trainer.estimate_accept_len(held_out, k=1) <= 2.0


def test_accept_len_cuts_chains_where_a_sampled_record_leaves_the_drafts(random_target, records):
    import torch

    from real.drafter.records import HiddenRecord
    from real.drafter.spot import SpotTrainer

    trainer = SpotTrainer(random_target, lr=3e-3, seed=0)
    trainer.train_until(threading.Event(), records, max_steps=40)
    greedy = trainer.estimate_accept_len(records[:4], k=3)
    # the same hidden states but other tokens: the target's greedy reference no longer follows
    other = [HiddenRecord([(t + 1) % 40 for t in r.token_ids], r.hidden) for r in records[:4]]
    assert 1.0 <= trainer.estimate_accept_len(other, k=3) < greedy
    with pytest.raises(ValueError):
        trainer.estimate_accept_len([HiddenRecord([1, 2, 3], torch.zeros(3, 32))], k=3)


def test_runs_are_deterministic_and_state_round_trips(random_target, records, tmp_path):
    import torch

    from real.drafter.checkpoint import load_drafter, save_drafter
    from real.drafter.eagle import EagleDrafter
    from real.drafter.spot import SpotTrainer, average_states

    a, b = SpotTrainer(random_target, seed=5), SpotTrainer(random_target, seed=5)
    a.train_until(threading.Event(), records, max_steps=3)
    saved = a.state_dict()
    torch.save(saved, tmp_path / "spot.pt")
    b.load_state_dict(torch.load(tmp_path / "spot.pt"))
    a.train_until(threading.Event(), records, max_steps=3)
    # resumed: same batches, same Adam moments
    b.train_until(threading.Event(), records, max_steps=3)
    sa, sb = a.drafter_state(), b.drafter_state()
    assert b.steps == 6 and all(torch.equal(sa[k], sb[k]) for k in sa)

    # As the coordinator saves what a step's spot trainers left: the states averaged by steps done,
    # on top of the target's embedding and head.
    drafter = EagleDrafter.from_target(random_target)
    drafter.load_drafter_state_dict(average_states([a.drafter_state()], [float(a.steps)]))
    out = save_drafter(drafter, tmp_path / "drafter", random_target.config)
    info = json.loads((out / "tlt_drafter.json").read_text())
    assert info["drafter_config"]["hidden_size"] == 32 and "train_config" not in info
    again = load_drafter(out, random_target).drafter_state_dict()
    assert all(torch.equal(again[k], sa[k]) for k in sa)
    c = SpotTrainer(random_target, drafter_dir=out)
    assert all(torch.equal(c.drafter_state()[k], sa[k]) for k in sa)
    with pytest.raises(ValueError):
        c.load_drafter_state({k: v for k, v in sa.items() if k != "fc.weight"})


def test_set_target_shares_the_new_embedding_and_head(random_target, records):
    import copy

    import torch

    from real.drafter.spot import SpotTrainer

    trainer = SpotTrainer(copy.deepcopy(random_target))
    before = trainer.drafter_state()
    updated = copy.deepcopy(random_target)
    with torch.no_grad():
        updated.lm_head.weight.mul_(2.0)
    trainer.set_target(updated)
    assert (
        trainer.drafter.lm_head is updated.lm_head
        and trainer.drafter.embed_tokens is updated.get_input_embeddings()
    )
    assert not updated.lm_head.weight.requires_grad
    # own weights kept
    assert all(torch.equal(before[k], v) for k, v in trainer.drafter_state().items())
    assert trainer.train_until(threading.Event(), records, max_steps=2).steps == 2
    assert torch.equal(updated.lm_head.weight, random_target.lm_head.weight * 2.0)  # still frozen


def test_average_states(random_target):
    import torch

    from real.drafter.spot import SpotTrainer, average_states

    s1 = SpotTrainer(random_target, seed=1).drafter_state()
    s2 = SpotTrainer(random_target, seed=2).drafter_state()
    first = average_states([s1, s2], [1, 0])
    assert all(torch.equal(first[k], s1[k]) for k in s1)
    mean = average_states([s1, s2], [3, 3])
    assert all(torch.allclose(mean[k], (s1[k] + s2[k]) / 2) for k in s1)
    with pytest.raises(ValueError):
        average_states([s1, s2], [0, 0])


# ---------------------------------------------------------------- n-gram, judged like the drafter


def test_ngram_replay_proposes_what_vllms_ngram_drafter_does():
    pytest.importorskip("vllm")
    import numpy as np
    from vllm.v1.spec_decode.ngram_proposer import (
        _find_longest_matched_ngram_and_propose_tokens as vllm_propose,
    )

    from real.drafter.ngram import propose

    rng = np.random.default_rng(0)
    cases = [[1, 2, 3, 1, 2], [1, 2], [5], [7, 7, 7, 7, 7], [1, 2, 3, 4, 9, 1, 2, 3, 4, 8, 2, 3, 4]]
    cases += [
        rng.integers(0, v, n).tolist()
        for v, n in ((3, 40), (4, 12), (6, 80), (2, 9), (50, 30))
        for _ in range(20)
    ]
    for tokens in cases:
        for k in (1, 3, 6):
            want = vllm_propose(
                np.asarray(tokens, dtype=np.int32),
                min_ngram=2,
                max_ngram=4,
                max_model_len=4096,
                k=k,
            )
            assert propose(tokens, k) == want.tolist(), (tokens, k)


def test_ngram_estimate_counts_the_lookup_drafts_the_target_accepts(random_target, records):
    """On greedy records the target's references are the records' own next tokens, so the
    estimate is 1 + the mean common prefix of the lookup's draft and what the record did next."""
    from real.drafter.ngram import propose
    from real.drafter.records import HiddenRecord
    from real.drafter.spot import SpotTrainer

    # Without their first 2 tokens, every reference a chain is judged on lies past the 4-token
    # prompt: lm_head(hidden[i]) is the record's token i + 1 for every i >= 1.
    greedy = [HiddenRecord(r.token_ids[2:], r.hidden[2:]) for r in records]
    trainer = SpotTrainer(random_target)
    k = 3
    expected = []
    for r in greedy:
        ids = r.token_ids
        # what the target would say after the record's last token: the last chain is judged on it
        after = int(trainer.drafter.lm_head(r.hidden[-1]).argmax())
        for t in range(len(ids) - 1 - k + 1):
            n = 0
            for d, nxt in zip(propose(ids[: t + 2], k), ids[t + 2:] + [after]):
                if d != nxt:
                    break
                n += 1
            expected.append(n)
    est = trainer.estimate_ngram_accept_len(greedy, k, max_starts=1000)
    assert est == pytest.approx(1.0 + sum(expected) / len(expected), abs=1e-6)
    assert 1.0 < est <= k + 1  # the random target's greedy loops give the lookup something to find


def test_chain_drafts_are_the_drafters_own_greedy_chain(random_target, records):
    """The cached chain (context keys once, one new position per draft step) drafts exactly what
    re-running the drafter over [context; drafts so far] at every step drafts."""
    import torch

    from real.drafter.chains import chain_drafts
    from real.drafter.spot import SpotTrainer

    trainer = SpotTrainer(random_target, lr=3e-3, seed=0)
    # a drafter that agrees sometimes
    trainer.train_until(threading.Event(), records[:8], max_steps=20)
    drafter = trainer.drafter.eval()
    rec = records[0]
    ids, hidden = torch.tensor(rec.token_ids), rec.hidden
    starts, k = torch.tensor([2, 7, 15]), 4
    fast = torch.stack(list(chain_drafts(drafter, ids, hidden, starts, k)), dim=1)
    with torch.no_grad():
        for row, t in enumerate(starts.tolist()):
            hid, tok = hidden[: t + 1].clone(), ids[1: t + 2].clone()
            for j in range(k):
                g = drafter.predict_hidden(hid[None], tok[None])[0, -1]
                d = drafter.lm_head(g).argmax(-1)
                assert int(d) == int(fast[row, j]), (t, j)
                hid, tok = torch.cat((hid, g[None])), torch.cat((tok, d[None]))


def test_a_static_drafter_is_judged_on_the_current_target(random_target, records):
    """`static_drafter(state)` rebuilds a drafter from saved weights: judged on the same records it
    gives what the trainer's drafter gave when it had those weights, however far training went."""
    from real.drafter.spot import SpotTrainer

    trainer = SpotTrainer(random_target, lr=3e-3, seed=0)
    initial = trainer.drafter_state()
    before = trainer.estimate_accept_len(records[:4], k=3)
    trainer.train_until(threading.Event(), records, max_steps=20)
    static = trainer.static_drafter(initial)
    assert trainer.estimate_accept_len(records[:4], k=3, drafter=static) == pytest.approx(before)
    stop = threading.Event()
    stop.set()
    assert math.isnan(trainer.estimate_accept_len(records[:4], k=3, stop=stop))
