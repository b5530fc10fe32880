"""Spot drafter training (real/spot.py) and run checkpoints (real/checkpoint.py).

Torch-only and fast: a random-weight tiny Qwen2 target (as tests/test_real_engine.py's), one
torch thread. The checkpoint tests need no torch beyond the random-state round trip.
"""

from __future__ import annotations

import importlib.util
import json
import random
import threading

import numpy as np
import pytest

from real.checkpoint import (
    CheckpointError,
    load_latest,
    restore_rng,
    rng_state,
    save_checkpoint,
)

HAVE_TORCH = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "safetensors"))
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch/transformers/safetensors are not installed (the 'cpu' extra)")


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    if HAVE_TORCH:
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(1)
        yield
        torch.set_num_threads(before)
    else:
        yield


# random_target: tests/conftest.py (a random-weight tiny Qwen2, as tests/test_real_engine.py uses)


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
    from real.spot import SpotTrainer

    return SpotTrainer(random_target).hidden_records(greedy_sequences)


# ---------------------------------------------------------------- the buffer


@needs_torch
def test_buffer_keeps_the_last_rl_steps():
    from real.spot import DrafterBuffer, HiddenRecord

    buf = DrafterBuffer(max_steps=2)
    rec = lambda n: HiddenRecord(list(range(n)), None)  # noqa: E731 - the buffer reads token_ids only
    buf.add(1, [rec(3)])
    buf.add(2, [rec(4), rec(5)])
    buf.add(2, [rec(6)])  # a second worker's records of the same step
    assert buf.steps() == [2, 1] and len(buf) == 4 and buf.tokens() == 18
    buf.add(3, [rec(7)])
    assert buf.steps() == [3, 2] and [len(r.token_ids) for r in buf.records()] == [7, 4, 5, 6]
    buf.add(1, [rec(8)])  # older than all held: dropped at once
    assert buf.steps() == [3, 2] and buf.tokens() == 22
    with pytest.raises(ValueError):
        DrafterBuffer(0)


# ---------------------------------------------------------------- training


@needs_torch
def test_hidden_records_are_the_target_final_norm_states(random_target, records, greedy_sequences):
    import torch

    assert len(records) == len(greedy_sequences)
    r = records[0]
    assert r.token_ids == greedy_sequences[0] and r.hidden.shape == (32, 32) and r.hidden.dtype == torch.float32
    with torch.no_grad():
        last = random_target.model(torch.tensor([r.token_ids])).last_hidden_state[0]
    assert torch.allclose(r.hidden, last, atol=1e-5)


@needs_torch
def test_stop_set_before_the_call_means_no_step(random_target, records):
    from real.spot import SpotTrainer

    trainer = SpotTrainer(random_target)
    stop = threading.Event()
    stop.set()
    res = trainer.train_until(stop, records)
    assert res.steps == 0 and res.stopped and trainer.steps == 0
    res = trainer.train_until(threading.Event(), [], max_steps=5)  # no data: returns at once
    assert res.steps == 0 and not res.stopped


@needs_torch
def test_stop_from_another_thread_ends_after_the_step_in_flight(random_target, records, monkeypatch):
    """The stop is set by another thread while step 4 runs: step 4 completes, no step 5 starts."""
    import real.spot as spot

    trainer = spot.SpotTrainer(random_target)
    stop, in_step_4 = threading.Event(), threading.Event()
    calls = []
    real_step = spot.train_step

    def step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            in_step_4.set()
            assert stop.wait(10)  # the other thread has set it, mid-step
        return real_step(*args, **kwargs)

    monkeypatch.setattr(spot, "train_step", step)
    setter = threading.Thread(target=lambda: (in_step_4.wait(10), stop.set()))
    setter.start()
    res = trainer.train_until(stop, records)
    setter.join()
    assert res.stopped and res.steps == 4 and len(calls) == 4 and trainer.steps == 4
    res = trainer.train_until(threading.Event(), records, max_steps=3)
    assert res.steps == 3 and not res.stopped and trainer.steps == 7


@needs_torch
def test_training_lowers_the_loss_and_raises_acceptance(random_target, records):
    from real.spot import SpotTrainer

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


@needs_torch
def test_accept_len_cuts_chains_where_a_sampled_record_leaves_the_drafts(random_target, records):
    import torch

    from real.spot import HiddenRecord, SpotTrainer

    trainer = SpotTrainer(random_target, lr=3e-3, seed=0)
    trainer.train_until(threading.Event(), records, max_steps=40)
    greedy = trainer.estimate_accept_len(records[:4], k=3)
    # the same hidden states but other tokens: the target's greedy reference no longer follows
    other = [HiddenRecord([(t + 1) % 40 for t in r.token_ids], r.hidden) for r in records[:4]]
    assert 1.0 <= trainer.estimate_accept_len(other, k=3) < greedy
    with pytest.raises(ValueError):
        trainer.estimate_accept_len([HiddenRecord([1, 2, 3], torch.zeros(3, 32))], k=3)


@needs_torch
def test_runs_are_deterministic_and_state_round_trips(random_target, records, tmp_path):
    import torch

    from real.eagle import load_drafter
    from real.spot import SpotTrainer

    a, b = SpotTrainer(random_target, seed=5), SpotTrainer(random_target, seed=5)
    a.train_until(threading.Event(), records, max_steps=3)
    saved = a.state_dict()
    torch.save(saved, tmp_path / "spot.pt")
    b.load_state_dict(torch.load(tmp_path / "spot.pt"))
    a.train_until(threading.Event(), records, max_steps=3)
    b.train_until(threading.Event(), records, max_steps=3)  # resumed: same batches, same Adam moments
    sa, sb = a.drafter_state(), b.drafter_state()
    assert b.steps == 6 and all(torch.equal(sa[k], sb[k]) for k in sa)

    out = a.save(tmp_path / "drafter")
    info = json.loads((out / "tlt_drafter.json").read_text())
    assert info["spot_steps"] == 6 and "final" in info
    again = load_drafter(out, random_target).drafter_state_dict()
    assert all(torch.equal(again[k], sa[k]) for k in sa)
    c = SpotTrainer(random_target, drafter_dir=out)
    assert all(torch.equal(c.drafter_state()[k], sa[k]) for k in sa)
    with pytest.raises(ValueError):
        c.load_drafter_state({k: v for k, v in sa.items() if k != "fc.weight"})


@needs_torch
def test_set_target_shares_the_new_embedding_and_head(random_target, records):
    import copy

    import torch

    from real.spot import SpotTrainer

    trainer = SpotTrainer(copy.deepcopy(random_target))
    before = trainer.drafter_state()
    updated = copy.deepcopy(random_target)
    with torch.no_grad():
        updated.lm_head.weight.mul_(2.0)
    trainer.set_target(updated)
    assert trainer.drafter.lm_head is updated.lm_head and trainer.drafter.embed_tokens is updated.get_input_embeddings()
    assert not updated.lm_head.weight.requires_grad
    assert all(torch.equal(before[k], v) for k, v in trainer.drafter_state().items())  # own weights kept
    assert trainer.train_until(threading.Event(), records, max_steps=2).steps == 2
    assert torch.equal(updated.lm_head.weight, random_target.lm_head.weight * 2.0)  # still frozen


@needs_torch
def test_average_states(random_target):
    import torch

    from real.spot import SpotTrainer, average_states

    s1 = SpotTrainer(random_target, seed=1).drafter_state()
    s2 = SpotTrainer(random_target, seed=2).drafter_state()
    first = average_states([s1, s2], [1, 0])
    assert all(torch.equal(first[k], s1[k]) for k in s1)
    mean = average_states([s1, s2], [3, 3])
    assert all(torch.allclose(mean[k], (s1[k] + s2[k]) / 2) for k in s1)
    with pytest.raises(ValueError):
        average_states([s1, s2], [0, 0])


# ---------------------------------------------------------------- checkpoints


def _write_text(text):
    return lambda path: path.write_text(text)


def test_checkpoint_round_trip_and_pruning(tmp_path):
    run = tmp_path / "run"
    assert load_latest(run) is None
    for step in (1, 2, 3):
        ck = save_checkpoint(run, step, {"metrics": [step], "policy": "tlt"},
                             {"trainer.pt": _write_text(f"t{step}"), "model": lambda p: p.mkdir()})
        assert ck.dir.name == f"step-{step:06d}"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000002", "step-000003"]
    latest = load_latest(run)
    assert latest.step == 3 and latest.state == {"metrics": [3], "policy": "tlt"}
    assert latest.path("trainer.pt").read_text() == "t3" and latest.path("model").is_dir()
    assert (run / "LATEST").read_text().strip() == "checkpoints/step-000003"
    assert not [p for p in run.rglob(".*")]  # no temp files or dirs left


def test_partial_checkpoint_is_skipped(tmp_path):
    run = tmp_path / "run"
    save_checkpoint(run, 1, {"a": 1}, {})
    save_checkpoint(run, 2, {"a": 2}, {})
    partial = run / "checkpoints" / "step-000003"
    partial.mkdir()
    (partial / "trainer.pt").write_text("half")  # killed before state.json
    (run / "LATEST").write_text("checkpoints/step-000003\n")
    assert load_latest(run).step == 2
    (run / "LATEST").unlink()  # no pointer at all: the newest complete step
    assert load_latest(run).step == 2
    save_checkpoint(run, 3, {"a": 3}, {})  # redoing step 3 replaces the partial directory
    assert load_latest(run).state == {"a": 3}
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000002", "step-000003"]


def test_corrupt_state_is_an_error_naming_the_file(tmp_path):
    run = tmp_path / "run"
    ck = save_checkpoint(run, 7, {"a": 1}, {})
    ck.path("state.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"step-000007/state\.json"):
        load_latest(run)


def test_rng_state_round_trip_is_json():
    state = json.loads(json.dumps(rng_state()))
    expect = (random.random(), np.random.rand())
    torch_expect = None
    if HAVE_TORCH:
        import torch

        torch_expect = torch.rand(3)
    restore_rng(state)
    assert (random.random(), np.random.rand()) == expect
    if HAVE_TORCH:
        assert torch.equal(torch.rand(3), torch_expect)
