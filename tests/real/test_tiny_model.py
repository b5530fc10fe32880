"""The tiny reasoning model's parts (real/tiny/): the GCD task, the character tokenizer,
`init_model`.

No vLLM here (tests/real/test_engine.py starts engines); `python -m real.experiments.check_vllm`
compares vLLM's greedy output with ours on a trained model.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics

import pytest

from real.tiny import task

# ---------------------------------------------------------------- the task


def test_solutions_are_right_and_fit_the_cap():
    import random

    from real.tiny.task import _pairs_by_steps

    rng = random.Random(0)
    pairs = [
        (rng.randint(task.LOW, task.HIGH), rng.randint(task.LOW, task.HIGH)) for _ in range(3000)
    ]
    pool = _pairs_by_steps("all")
    assert sorted(pool) == list(range(1, task.MAX_STEPS + 1))  # every difficulty can be drawn
    pairs += [divmod(v[-1], 1000) for v in pool.values()]      # one pair of each difficulty
    for a, b in pairs:
        text, answer, steps = task.solve(a, b)
        assert answer == math.gcd(a, b) and steps == task.steps_of(a, b)
        lines = text.split("\n")
        assert len(lines) == steps + 1 and lines[-1] == f"A: {answer}"
        assert all(len(line) == 11 for line in lines[:-1])  # "xxx-yyy=zzz"
        if steps <= task.MAX_STEPS:
            assert len(text) + 1 <= task.MAX_RESPONSE_TOKENS  # one token per character, plus </s>


def test_solution_format():
    p = task.make_problem(35, 91)
    assert p.prompt == "Q: gcd(35,91)=?\n"
    assert (
        p.solution
        == "091-035=056\n056-035=021\n035-021=014\n021-014=007\n014-007=007\n007-007=000\nA: 7"
    )
    assert (p.answer, p.difficulty) == (7, 6)


@pytest.mark.parametrize("response, expected", [
    ("091-035=056\nA: 7", 1.0),
    ("A: 7", 1.0),                       # the steps are not checked
    ("A:7\n", 1.0),
    ("091-035=056\nA: 007", 1.0),        # leading zeros: the same integer
    ("091-035=056\nA: 8", 0.0),          # wrong
    ("A: 7 or 8", 0.0),                  # not an integer alone on its line
    ("091-035=056\n007-007=000", 0.0),   # no answer line
    ("", 0.0),
    ("A: ", 0.0),
    ("A: seven", 0.0),
    ("xA: 7", 0.0),                      # the answer line must start with "A:"
    ("A: 8\nA: 7", 0.0),                 # the first answer counts
    ("A: 7\ngarbage after", 1.0),
])
def test_reward(response, expected):
    p = task.make_problem(35, 91)
    assert task.reward(p, response) == expected


def test_parse_answer():
    assert task.parse_answer("012-006=006\n006-006=000\nA: 6") == 6
    assert task.parse_answer("no answer") is None
    assert task.parse_answer("A: -3") == -3


def test_problems_are_deterministic_and_splits_disjoint():
    a = task.make_problems(200, seed=3)
    assert a == task.make_problems(200, seed=3)
    assert a != task.make_problems(200, seed=4)
    train = {(p.a, p.b) for p in task.make_problems(500, seed=0, split="train")}
    test = {(p.a, p.b) for p in task.make_problems(500, seed=0, split="test")}
    assert train and test and not train & test
    with pytest.raises(ValueError, match="mix"):
        task.make_problems(1, mix="nope")
    with pytest.raises(ValueError, match="split"):
        task.make_problems(1, split="nope")


def test_mix_changes_the_length_distribution():
    def lengths(mix):
        return sorted(len(p.solution) for p in task.make_problems(2000, seed=0, mix=mix))

    def pct(xs, q):
        return xs[int(q * (len(xs) - 1))]

    easy, default, hard = lengths("easy"), lengths("default"), lengths("hard")
    assert statistics.mean(easy) < statistics.mean(default) < statistics.mean(hard)
    assert pct(easy, 0.9) < pct(default, 0.9) < pct(hard, 0.9)
    # The default mix has a real long tail: most problems are short, a few are very long.
    assert pct(default, 0.5) < 100 and pct(default, 0.99) > 600
    assert 0.03 < sum(x > 470 for x in default) / len(default) < 0.08  # >= 40 steps
    for mix in task.MIXES:
        pmf = task.difficulty_pmf(mix)
        assert math.isclose(sum(pmf.values()), 1.0) and min(pmf) == 1 and max(pmf) == task.MAX_STEPS


def test_styles_variant_teaches_two_styles_and_rewards_one():
    """gcd-styles: the same prompts as gcd, solutions in two styles (about 1 in 4 spaced), and
    a reward of 0.5 for a right answer plus 0.5 for the spaced style."""
    plain = task.make_problems(400, seed=5)
    styled = task.make_problems(400, seed=5, variant_name="gcd-styles")
    assert [p.prompt for p in plain] == [p.prompt for p in styled]
    assert {p.style for p in plain} == {"compact"}
    spaced = [p for p in styled if p.style == "spaced"]
    assert 0.18 < len(spaced) / len(styled) < 0.32
    p = spaced[0]
    assert (
        p.solution.split("\n")[0]
        == f"{max(p.a, p.b):03d} - {min(p.a, p.b):03d} = {abs(p.a - p.b):03d}"
    )
    compact = task.make_problem(p.a, p.b)
    assert (task.style_of(p.solution), task.style_of(compact.solution)) == ("spaced", "compact")
    assert task.style_of("A: 7") is None
    assert task.reward(p, p.solution, "gcd-styles") == 1.0
    assert task.reward(p, compact.solution, "gcd-styles") == 0.5       # right, in the other style
    assert task.reward(p, p.solution.replace(f"A: {p.answer}", "A: 1000"), "gcd-styles") == 0.5
    assert (
        task.reward(p, compact.solution.replace(f"A: {p.answer}", "A: 1000"), "gcd-styles") == 0.0
    )
    # plain gcd: any style
    assert task.reward(p, compact.solution) == task.reward(p, p.solution) == 1.0
    with pytest.raises(ValueError, match="variant"):
        task.reward(p, p.solution, "nope")


# ---------------------------------------------------------------- the tokenizer


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    from real.tiny.model import qwen2_config
    from real.tiny.tokenizer import build_tokenizer

    d = tmp_path_factory.mktemp("tok")
    build_tokenizer(d)
    # AutoTokenizer then picks its class for a qwen2 model, as vLLM does
    qwen2_config().save_pretrained(d)
    return d


@pytest.mark.needs_torch
def test_tokenizer_round_trips_task_text(tok_dir):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from real.tiny.tokenizer import CHARS, EOS_ID, PAD_ID, vocab_size

    auto = AutoTokenizer.from_pretrained(tok_dir)
    fast = PreTrainedTokenizerFast.from_pretrained(tok_dir)
    assert len(auto) == len(fast) == vocab_size() == 100
    assert (fast.pad_token_id, fast.eos_token_id) == (PAD_ID, EOS_ID)
    texts = [CHARS, "  two spaces\n\nnewlines ", "Q: gcd(10,999)=?\n"]
    for mix in task.MIXES:
        texts += [p.prompt + p.solution for p in task.make_problems(30, seed=1, mix=mix)]
    for text in texts:
        ids = fast(text, add_special_tokens=False)["input_ids"]
        assert auto(text, add_special_tokens=False)["input_ids"] == ids
        assert auto(text)["input_ids"] == ids  # no BOS/EOS added by either path
        assert len(ids) == len(text)  # one token per character
        assert fast.decode(ids) == text and auto.decode(ids) == text
    assert auto.decode([5, EOS_ID], skip_special_tokens=True) == fast.decode([5])


# ---------------------------------------------------------------- the model

STEPS = 5


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from real.tiny.model import init_model

    root = tmp_path_factory.mktemp("models")
    quiet = lambda _m: None  # noqa: E731
    infos = {name: init_model(root / name, seed=seed, steps=STEPS, evaluate_after=False, log=quiet,
                              tokens_per_batch=1024, threads=1)
             for name, seed in (("a", 0), ("b", 0), ("c", 1))}
    return root, infos


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.needs_torch
def test_init_model_is_deterministic(tiny_models):
    root, infos = tiny_models
    a, b, c = (_sha(root / n / "model.safetensors") for n in "abc")
    assert a == b, "same seed, different weights"
    assert a != c, "another seed, same weights"
    assert infos["a"]["final_loss"] == infos["b"]["final_loss"]
    saved = json.loads((root / "a" / "training.json").read_text())
    assert saved["seed"] == 0 and saved["steps"] == STEPS and saved["parameters"] > 900_000


@pytest.mark.needs_torch
def test_saved_model_loads_and_generates_greedily(tiny_models):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from real.tiny.generation import greedy_generate
    from real.tiny.model import load_model_dir

    root, _ = tiny_models
    d = load_model_dir(root / "a")
    model = AutoModelForCausalLM.from_pretrained(d)
    tok = AutoTokenizer.from_pretrained(d)
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.config.tie_word_embeddings is False
    assert model.config.hidden_size == 128 and model.config.num_hidden_layers == 4
    # one of another length
    prompts = [p.prompt for p in task.make_problems(3, seed=0)] + ["Q: gcd(1,2)=?\n"]
    got = greedy_generate(model, tok, prompts, max_new_tokens=6)
    # the batched loop equals a plain argmax loop, one prompt at a time
    for prompt, resp in zip(prompts, got):
        ids = tok(prompt)["input_ids"]
        ref = []
        with torch.no_grad():
            for _ in range(6):
                nxt = int(model(torch.tensor([ids + ref])).logits[0, -1].argmax())
                if nxt == tok.eos_token_id:
                    break
                ref.append(nxt)
        assert resp == ref


@pytest.mark.needs_torch
def test_load_model_dir_errors(tmp_path, tiny_models):
    from real.tiny.model import load_model_dir

    with pytest.raises(FileNotFoundError, match="no such directory.*tlt model init"):
        load_model_dir(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        load_model_dir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    with pytest.raises(ValueError, match="ForCausalLM"):
        load_model_dir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(FileNotFoundError, match="no weights"):
        load_model_dir(tmp_path)
    root, _ = tiny_models
    assert load_model_dir(str(root / "c")) == root / "c"


@pytest.mark.needs_torch
def test_cli_model_init(tmp_path):
    from typer.testing import CliRunner

    from workbench.cli import app

    res = CliRunner().invoke(
        app,
        [
            "model",
            "init",
            "--out",
            str(tmp_path / "m"),
            "--seed",
            "2",
            "--steps",
            "2",
            "--threads",
            "1",
            "--no-eval",
        ],
    )
    assert res.exit_code == 0, res.output
    info = json.loads((tmp_path / "m" / "training.json").read_text())
    assert info["steps"] == 2 and info["seed"] == 2
    bad = CliRunner().invoke(app, ["model", "init", "--out", str(tmp_path / "n"), "--mix", "nope"])
    assert bad.exit_code == 2 and "mix" in bad.output
    bad = CliRunner().invoke(
        app, ["model", "init", "--out", str(tmp_path / "n"), "--variant", "nope"]
    )
    assert bad.exit_code == 2 and "--variant" in bad.output and not (tmp_path / "n").exists()


@pytest.mark.needs_torch
def test_a_model_records_its_task_variant(tmp_path, tiny_models):
    """`tlt train` rewards by the variant the model was built for (training.json)."""
    from real.tiny.model import init_model, variant_of

    root, _ = tiny_models
    assert variant_of(root / "a") == "gcd"
    init_model(
        tmp_path / "s",
        seed=0,
        steps=1,
        evaluate_after=False,
        log=lambda _m: None,
        tokens_per_batch=1024,
        threads=1,
        variant_name="gcd-styles",
    )
    assert variant_of(tmp_path / "s") == "gcd-styles"
    info = tmp_path / "s" / "training.json"
    info.write_text(info.read_text().replace('"gcd-styles"', '"nope"'))
    with pytest.raises(ValueError, match=r"training\.json: field 'variant'"):
        variant_of(tmp_path / "s")
