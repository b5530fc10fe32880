"""The four eric-haibin-lin/verl-data logs shipped as extracted metrics of verbatim excerpts (read
page by page through a text index: no bytes, so no sha256): each reads with its provenance, its
training read as veRL ran it (Megatron packed, its logits padded, no recompute without a
granularity), and one calibrates; the phase model's rules these logs brought (a rank's share of
the vocabulary, `adv` apart from a timed `reward`) and the readers' (a config value split onto the
next line, an excerpt's provenance) on small inputs."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from workbench.contracts.training_shape import ModelShape, PhaseShape, TrainingShape
from workbench.runlog import calibrate as cal
from workbench.runlog.extract import Excerpt, Provenance, extract
from workbench.runlog.forward_costs import BATCHES, LENGTHS, ForwardGrid
from workbench.runlog.lengths import step_stats
from workbench.runlog.phases import BASES, phase_bases, step_bases
from workbench.runlog.prepared import prepare
from workbench.runlog.printed_config import parse_printed_config
from workbench.runlog.reader import read_run_log
from workbench.runlog.shape import ShapeFlags, run_shape
from workbench.runlog.training import training_shape

# file: (timed steps, validation-only step lines, the original's characters)
LOGS = {
    "deepseek-llm-7b-chat-megatron-bsz256_4-prompt512-resp512-0.695": (104, 2, 257_700),
    "qwen2-7b-fsdp2": (105, 1, 272_930),
    "qwen2-7b_math_megatron": (210, 1, 533_585),
    "deepseek7b_llm_math_megatron": (210, 1, 671_043),
}
QWEN = ShapeFlags(gpu="h100", arch="qwen2.5-7b")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "verl-data-cache"))


def _path(repo_root, name: str):
    return repo_root / "traces" / "published" / "verl-runs" / f"{name}.metrics.json"


def test_each_excerpted_log_reads_with_its_provenance(repo_root):
    """Every step line counted (the last step's number: timed plus validation-only), the source an
    excerpt of the original's size, its sha256 said not taken, the index's ids given."""
    for name, (timed, untimed, chars) in LOGS.items():
        path = _path(repo_root, name)
        log = read_run_log(path)
        src = json.loads(path.read_text())["source"]
        assert log.kind == "extract" and log.steps == timed
        assert log.skipped.untimed_steps == untimed
        assert list(log.metrics["step"]) == list(range(1, timed + 1))  # no gap, none twice
        assert src["sha256"] is None and src["excerpt"]["total_chars"] == chars
        assert src["excerpt"]["read_file_ids"] and "not in the repository's fetchable" in \
            src["excerpt"]["sha256_not_taken"]
        assert f"an excerpt of {chars} characters; sha256 not taken" in log.source
        assert "the excerpt's line" in log.where(0)
        timed_steps = log.column("timing_s/step")
        phases = sum(np.nan_to_num(log.column(c)) for c in log.metrics.columns
                     if c.startswith("timing_s/") and c != "timing_s/step")
        assert np.all((timed_steps >= phases - 0.01) & (timed_steps <= phases * 1.01 + 0.5))


def test_megatron_trains_as_veRL_ran_it(repo_root, tmp_path):
    """Packed layers and padded logits; no recompute though the config turns FSDP's checkpointing
    on; a recompute granularity of `full` turns it on; the FSDP2 log as its config says."""
    path = _path(repo_root, "qwen2-7b_math_megatron")
    log = read_run_log(path)
    t = training_shape(log, run_shape(log, QWEN))
    assert (t.strategy, t.tp, t.pp, t.dp) == ("megatron", 4, 2, 2)
    assert t.remove_padding and t.logits_padded and not t.model("actor").checkpointing
    assert log.config.get("actor_rollout_ref.model.enable_gradient_checkpointing").value is True
    assert any(x.field == "actor recompute" for x in t.taken)
    doc = json.loads(path.read_text())
    for granularity, on in (("full", True), ("selective", False)):
        doc["config"]["values"].append(["actor_rollout_ref.actor.megatron.override_transformer_"
                                        "config.recompute_granularity", granularity, 1])
        out = tmp_path / f"{granularity}.metrics.json"
        out.write_text(json.dumps(doc))
        again = read_run_log(out)
        assert training_shape(again, run_shape(again, QWEN)).model("actor").checkpointing is on
        doc["config"]["values"].pop()
    fsdp = read_run_log(_path(repo_root, "qwen2-7b-fsdp2"))
    f = training_shape(fsdp, run_shape(fsdp, QWEN))
    assert f.strategy == "fsdp2" and f.remove_padding and not f.logits_padded
    assert not f.model("actor").checkpointing  # its command turns FSDP's checkpointing off


def test_a_megatron_log_calibrates_and_holds_its_later_steps(repo_root):
    p = prepare(_path(repo_root, "qwen2-7b_math_megatron"), QWEN, fit_steps=100)
    c = cal.calibrate(p, 100, "qwen2-megatron")
    assert c.heldout.gen.steps == 110
    assert c.heldout.gen.median < 6.0 and c.heldout.update.median < 6.0
    assert c.heldout.step.median < 6.0


def _grid() -> ForwardGrid:
    seconds = tuple(tuple(1e-6 * b * n for n in LENGTHS) for b in BATCHES)
    return ForwardGrid("qwen2.5-0.5b", "h100", 2, False, seconds, 3e12, 151936)


def test_padded_logits_run_over_the_response_cap_and_a_rank_s_share_of_the_vocabulary():
    actor = ModelShape("actor", "qwen2.5-0.5b", param_bytes=4)
    lp = PhaseShape("old_log_prob", "actor", micro_batch=4)
    t = TrainingShape("megatron", 4, (actor,), (lp,), tp=2, remove_padding=True,
                      max_prompt_tokens=256, max_response_tokens=1024)
    length = np.array([300.0])
    packed = phase_bases(t, lp, _grid(), length, 64)  # 32 sequences a rank
    padded = phase_bases(replace(t, logits_padded=True), lp, _grid(), length, 64)
    per_token = 151936 / 2 * 24 / 3e12
    assert padded[0, 0] - packed[0, 0] == pytest.approx(32 * (1024 - 300) * per_token, rel=1e-9)


def test_adv_is_the_advantage_alone_where_the_reward_is_timed(tmp_path):
    (tmp_path / "x.log").write_text("step:1 - timing_s/gen:1.0 - response_length/mean:10.0 - "
                                    "response_length/max:20.0 - response_length/min:1.0 - "
                                    "prompt_length/mean:5.0\n")
    t = TrainingShape("fsdp", 1, (ModelShape("actor", "qwen2.5-0.5b"),), ())
    stats = step_stats(read_run_log(tmp_path / "x.log"))
    fixed, reward = BASES.index("fixed"), BASES.index("reward")
    apart = step_bases(t, {}, stats, 40, ("gen", "reward", "adv"), 0.0)
    inside = step_bases(t, {}, stats, 40, ("gen", "adv"), 0.0)
    assert apart.of("adv")[0, fixed] == 1.0 and apart.of("adv")[0, reward] == 0.0
    assert apart.of("reward")[0, reward] == 40 and inside.of("adv")[0, reward] == 40


def test_a_config_value_split_onto_the_next_line_continues_the_dict():
    p = "(TaskRunner pid=1) "
    lines = [p + "{'actor_rollout_ref': {'actor': {'ppo_epochs': 1,",
             p + "                                 'strategy': 'fsdp2'},",
             p + "                       'rollout': {'n': ",
             p + "5}},",
             p + " 'data': {'max_response_length': 1024}}"]
    pc = parse_printed_config(lines)
    assert pc.get("actor_rollout_ref.rollout.n").value == 5
    assert pc.get("data.max_response_length").value == 1024


def test_an_excerpt_s_provenance(tmp_path):
    lines = tmp_path / "x.lines.log"
    lines.write_text("python3 -m verl.trainer.main_ppo data.train_batch_size=8 "
                     "actor_rollout_ref.rollout.n=2\n"
                     + "".join(f"step:{i} - timing_s/gen:{1 + i / 10} - timing_s/step:2.0 - "
                               "response_length/mean:10.0 - response_length/max:20.0 - "
                               "response_length/min:1.0 - prompt_length/mean:5.0\n"
                               for i in range(1, 4)))
    out = tmp_path / "x.metrics.json"
    doc = extract(lines, Provenance("o/r", "c0ffee", "logs/x.log"), out,
                  Excerpt(12_345, ("42",)))
    ex = doc["source"]["excerpt"]
    assert doc["source"]["sha256"] is None and doc["source"]["bytes"] is None
    assert ex["total_chars"] == 12_345 and ex["read_file_ids"] == ["42"]
    assert ex["excerpt_bytes"] == len(lines.read_bytes()) and len(ex["excerpt_sha256"]) == 64
    assert "every step line (3: 3 timed, 0 validation-only)" in ex["kept"]
    assert "--excerpt-of-chars 12345 --read-id 42" in doc["source"]["extracted_by"]
    back = read_run_log(out)
    assert back.steps == 3 and "(an excerpt of 12345 characters" in back.source


def test_a_pair_s_kind_names_what_differs():
    from pathlib import Path

    from workbench.runlog.shape import ShapeFlags as Flags
    from workbench.runlog.transfer_table import TableLog, pair_kind, pairs_of

    def log(cluster, recipe, model):
        return TableLog(Path("x"), cluster, recipe, model, 10, Flags())

    a, b = log("c1", "r1", "m7"), log("c1", "r1", "m7b")
    c, d = log("c2", "r2", "m7"), log("c3", "r3", "m0.5")
    assert pair_kind(a, a, (7e9, 7e9), ("fsdp", "fsdp")) == "change"
    assert pair_kind(a, b, (7.6e9, 6.9e9), ("megatron", "megatron")) == "model"
    assert pair_kind(a, c, (7e9, 7e9), ("fsdp", "megatron")) == "cluster, backend"
    assert pair_kind(a, d, (7e9, 0.5e9), ("fsdp", "fsdp")) == "cluster, size"
    # a and c share only their model, d shares nothing with anyone
    assert [(i, j) for i, j, _ in pairs_of([a, c, d], [7e9] * 3, ["fsdp"] * 3)] == [(0, 1), (1, 0)]
