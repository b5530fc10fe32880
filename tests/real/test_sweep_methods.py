"""The engine sweep's target and drafter given as a directory or a Hugging Face hub id: a hub id
is read from the local cache with no download, and one the cache lacks (on a machine that cannot
download it) is refused naming the option and the fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from real.sweep.methods import SweepError, cost_kind, resolve_model, speculative
from workbench.contracts.policy import DrafterKind

pytestmark = [pytest.mark.needs_torch, pytest.mark.needs_reference]


def _cached(cache: Path, hub_id: str, source: Path) -> Path:
    """`source` laid out as Hugging Face's cache keeps a downloaded snapshot of `hub_id`."""
    repo = cache / f"models--{hub_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / ("0" * 40)
    shutil.copytree(source, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    return snapshot


def test_a_hub_id_in_the_local_cache_is_used_as_it_is(tmp_path, reference_drafter, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = _cached(tmp_path / "hub", "tlt/reference-drafter", reference_drafter)
    ref = resolve_model("tlt/reference-drafter", "--drafter")
    assert ref.path == snapshot and ref.hub_id == "tlt/reference-drafter"
    assert ref.name == "tlt/reference-drafter"
    spec = speculative("eagle3", 3, ref, 64, True)
    assert spec["model"] == str(snapshot) and spec["num_speculative_tokens_per_batch_size"] == [
        [1, 64, 3]]


def test_a_directory_is_used_and_a_bad_reference_refused(tmp_path, reference_model, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert resolve_model(str(reference_model), "--model").path == reference_model
    (tmp_path / "empty").mkdir()
    with pytest.raises(SweepError, match="--model .*empty: no config.json"):
        resolve_model(str(tmp_path / "empty"), "--model")
    with pytest.raises(SweepError, match="no/such/thing: no config.json"):
        resolve_model("no/such/thing", "--model")
    with pytest.raises(SweepError, match="--drafter nobody/none: not in the local Hugging Face"):
        resolve_model("nobody/none", "--drafter")


def test_an_eagle_head_that_does_not_match_its_target_is_refused_before_an_engine_starts(
        tmp_path, reference_model, reference_drafter):
    """The sweep checks the head as `tlt export` and `tlt train` do (real/drafter/resolve.py)."""
    import json

    from real.sweep.methods import check_drafter

    target, head = resolve_model(str(reference_model), "--model"), resolve_model(
        str(reference_drafter), "--drafter")
    assert any("checked" in n for n in check_drafter("eagle", head, target))
    other = tmp_path / "other"
    shutil.copytree(reference_model, other)
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "vocab_size": cfg["vocab_size"] + 7}))
    with pytest.raises(SweepError, match="--drafter .*vocab"):
        check_drafter("eagle", head, resolve_model(str(other), "--model"))


def test_drafting_is_priced_as_a_lookup_for_ngram_and_a_forward_for_every_model():
    assert cost_kind("ngram") == DrafterKind.NGRAM
    assert {cost_kind(m) for m in ("eagle", "eagle3", "draft_model", "mtp")} == {DrafterKind.EAGLE}
    assert speculative("ngram", 2, None, 16, False) == {
        "method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4,
        "prompt_lookup_min": 2}


def test_prompts_reach_the_context_through_the_chat_template(reference_model):
    """A task's problems as earlier turns of a chat, in the model's template, then the current one
    with its solution begun: exactly `context` tokens, `reserve` of its solution left."""
    from transformers import AutoTokenizer

    from real.sweep.prompts import cell_prompts, has_chat_template
    from workbench.contracts.task import TaskProblem

    tok = AutoTokenizer.from_pretrained(str(reference_model))
    pool = [TaskProblem(f"Q: gcd({a},{b})=?\n", "1", "x" * 40 + f"\nA: {a}") for a, b in
            zip(range(10, 60), range(60, 110))]
    raw = cell_prompts(tok, pool, 3, 120, 16)
    assert not has_chat_template(tok) and [len(p) for p in raw] == [120, 120, 120]
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    chat = cell_prompts(tok, pool, 3, 120, 16)  # whole turns: the nearest count below
    assert all(120 - 80 < len(p) <= 120 for p in chat) and len({tuple(p) for p in chat}) == 3
    text = tok.decode(chat[0])
    assert text.count("<|user|>") >= 2 and "<|assistant|>" in text  # earlier turns, then this one
    current = next(p for p in pool if p.prompt in text.rsplit("<|user|>", 1)[1])
    begun = text.rsplit("<|assistant|>", 1)[1]
    assert current.solution.startswith(begun) and len(current.solution) - len(begun) >= 16
