"""Draft lengths changed between engine steps (RolloutEngine(adaptive=True),
real/rollout/adaptive.py).

The vLLM tests share ONE adaptive engine (module-scoped) on the shipped reference model and
drafter (traces/reference/); they are skipped, with the reason, where vLLM or those files are
missing. The rest needs no vLLM: the speculative config of an adaptive engine, and the
controller's rule driven with hand-made step rows.
"""

from __future__ import annotations

import json

import pytest

from real.rollout.adaptive import BanditController
from real.rollout.engine import RolloutEngine
from real.rollout.requests import EngineStepRow, RolloutRequest, Sampling
from real.rollout.spec_config import EngineConfigError, speculative_config
from workbench.contracts.bandit import FixedTable
from workbench.contracts.policy import (
    BanditConfig,
    DrafterConfig,
    Policy,
    ScheduleBucket,
)

MAX_NUM_SEQS = 16


def _policy(
    kind: str = "eagle",
    rows=((1, 4, 4), (5, 16, 2)),
    threshold: int = 12,
    algorithm: str = "beg",
    arms=(0, 1, 2, 4),
    interval: int = 4,
    epsilon: float = 0.2,
) -> Policy:
    pol = Policy(
        name=f"adaptive-{kind}",
        sd_threshold=threshold,
        schedule=tuple(ScheduleBucket(*r) for r in rows),
        bandit=BanditConfig(
            algorithm=algorithm, arms=arms, epsilon=epsilon, decision_interval=interval
        ),
        drafter=DrafterConfig(kind=kind),
    )
    pol.check()
    return pol


# ---------------------------------------------------------------- no vLLM


def test_adaptive_speculative_config_always_has_a_table_sized_for_the_arms():
    uniform = _policy("ngram", rows=((1, 16, 2),), threshold=16, arms=(0, 2, 6))
    assert "num_speculative_tokens_per_batch_size" not in speculative_config(uniform, None, 16)
    spec = speculative_config(uniform, None, 16, adaptive=True)
    assert spec["num_speculative_tokens"] == 6 and spec[
        "num_speculative_tokens_per_batch_size"
    ] == [[1, 16, 2]]
    # A fixed table never picks an arm: the schedule's largest K is enough.
    fixed = _policy("ngram", rows=((1, 16, 2),), threshold=16, algorithm="fixed", arms=(0, 2, 6))
    assert speculative_config(fixed, None, 16, adaptive=True)["num_speculative_tokens"] == 2
    # A schedule of K=0 is no SD for a plain engine, but an adaptive one must be able to turn SD on.
    zero = _policy("ngram", rows=((1, 8, 0),), threshold=8, arms=(0, 3))
    assert speculative_config(zero, None, 16) is None
    spec = speculative_config(zero, None, 16, adaptive=True)
    assert spec["num_speculative_tokens"] == 3
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 8, 0], [9, 16, 0]]


def test_draft_lengths_need_an_adaptive_engine():
    eng = RolloutEngine.__new__(RolloutEngine)  # the checks run before vLLM is touched
    eng._scheduler, eng.adaptive, eng.spec = None, False, None
    with pytest.raises(EngineConfigError, match="adaptive=True"):
        eng.set_draft_lengths([(1, 16, 2)])


class _FakeEngine:
    """What BanditController uses of a RolloutEngine: its table, K cap and batch limit."""

    def __init__(self, policy: Policy, max_draft_len: int = 4, max_num_seqs: int = MAX_NUM_SEQS):
        self.policy, self.max_draft_len, self.max_num_seqs = policy, max_draft_len, max_num_seqs
        self.tables: list[list[tuple[int, int, int]]] = []

    def set_draft_lengths(self, rows):
        self.tables.append(list(rows))


def _row(batch_size: int, new_tokens: int, wall_s: float) -> EngineStepRow:
    """An engine step row with the fields the controller reads; the rest zero."""
    return EngineStepRow(
        rl_step=0,
        worker=0,
        engine_step=0,
        start_s=0.0,
        wall_s=wall_s,
        batch_size=batch_size,
        num_waiting=0,
        prefill_requests=0,
        prefill_tokens=0,
        decode_requests=batch_size,
        scheduled_tokens=batch_size,
        context_mean=0.0,
        context_max=0,
        draft_len=0,
        num_drafts=0,
        num_draft_tokens=0,
        num_accepted_tokens=0,
        accepted_per_pos=[],
        new_tokens=new_tokens,
    )


def _drive(ctl, batches, tokens_per_s):
    rows = []
    for b in batches:
        ctl.before_step(b)
        row = _row(b, 10, 10 / tokens_per_s)
        ctl.after_step(row)
        rows.append(row)
    return rows


def test_controller_chooses_per_bucket_every_interval_and_learns_per_stint():
    pol = _policy(interval=3)
    eng = _FakeEngine(pol)
    ctl = BanditController(eng, seed=0)
    # Starts from the policy's schedule, cut at the threshold, SD off above it.
    assert eng.tables == [[(1, 4, 4), (5, 12, 2), (13, 16, 0)]]
    rows = _drive(ctl, [8] * 7 + [3] * 2 + [14] * 2, tokens_per_s=100.0)
    # Bucket 1 (5-12): choices at its steps 0, 3 and 6; bucket 0 (1-4) at its first step; none above
    # 12.
    assert [(s, b) for s, b, _ in ctl.decisions] == [(0, 1), (3, 1), (6, 1), (7, 0)]
    # BEG tries its arms in order first; each choice rewrites that bucket's row only.
    assert [k for *_, k in ctl.decisions] == [0, 1, 2, 0]
    assert eng.tables[-1] == [(1, 4, 0), (5, 12, 2), (13, 16, 0)]
    assert [r.chosen_k for r in rows] == [0, 0, 0, 1, 1, 1, 2, 0, 0, 0, 0]
    # One update per finished stint (arms 0 and 1 of bucket 1), with the stint's tokens per second.
    assert ctl.bandit.counts == {(1, 0): 1, (1, 1): 1}
    assert ctl.bandit.recent[(1, 1)][0] == pytest.approx(100.0)
    # The open choices (bucket 1's third, bucket 0's first) are learnt once they have run the
    # interval.
    assert {b: (ctl.k[b], n) for b, n in ctl.since.items()} == {1: (2, 1), 0: (0, 2)}
    _drive(ctl, [3, 3, 8, 8, 8], tokens_per_s=100.0)
    assert ctl.bandit.counts == {(1, 0): 1, (1, 1): 1, (1, 2): 1, (0, 0): 1}
    assert ctl.overhead_s > 0


def test_controller_counts_a_step_for_the_bucket_it_scheduled_and_resumes_from_a_checkpoint():
    pol = _policy(interval=2)
    ctl = BanditController(_FakeEngine(pol), seed=3)
    # predicted bucket 1, but the step scheduled 3 requests (bucket 0, never chosen)
    ctl.before_step(8)
    ctl.after_step(row := _row(3, 3, 0.01))
    assert row.chosen_k == 4 and ctl.since == {1: 0}
    _drive(ctl, [8, 3, 8, 8, 3, 3, 8], tokens_per_s=50.0)
    state, table = json.loads(json.dumps(ctl.state_dict())), ctl.rows()
    later = [8, 8, 3, 8, 3, 3, 8, 8, 8, 3] * 5
    whole = [r.chosen_k for r in _drive(ctl, later, tokens_per_s=70.0)]
    eng = _FakeEngine(pol)
    resumed = BanditController(eng, seed=99)
    resumed.load_state_dict(state)
    assert eng.tables[-1] == table
    assert [r.chosen_k for r in _drive(resumed, later, tokens_per_s=70.0)] == whole
    assert resumed.bandit.counts == ctl.bandit.counts


def test_fixed_table_controller_keeps_the_schedule():
    pol = _policy(algorithm="fixed", interval=1)
    ctl = BanditController(_FakeEngine(pol), seed=0)
    assert isinstance(ctl.bandit, FixedTable)
    assert [r.chosen_k for r in _drive(ctl, [1, 4, 5, 12, 13, 16], 100.0)] == [4, 4, 2, 2, 0, 0]


# ---------------------------------------------------------------- one adaptive vLLM engine

@pytest.fixture(scope="module")
def engine(reference_model, reference_drafter):
    eng = RolloutEngine(
        reference_model,
        _policy(),
        drafter_dir=reference_drafter,
        max_num_seqs=MAX_NUM_SEQS,
        max_model_len=1024,
        seed=0,
        kv_cache_gib=0.25,
        adaptive=True,
    )
    yield eng
    eng.close()


class _Script:
    """A controller that sets one K for every batch size from a per-step script."""

    def __init__(self, engine, ks):
        self.engine, self.ks, self.n = engine, ks, 0

    def before_step(self, batch_size):
        self.engine.set_draft_lengths([(1, MAX_NUM_SEQS, self.ks[min(self.n, len(self.ks) - 1)])])

    def after_step(self, row):
        row.chosen_k = self.ks[min(self.n, len(self.ks) - 1)]
        self.n += 1


@pytest.mark.needs_vllm
@pytest.mark.needs_reference
def test_set_draft_lengths_between_steps_changes_the_k_vllm_runs(engine, task_prompts):
    import os

    import torch

    assert engine.adaptive and engine.max_draft_len == 4
    # The in-process engine core leaves the process as it found it.
    assert torch.set_num_threads.__name__ == "set_num_threads"
    assert os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") != "0"
    assert engine.current_draft_lengths() == [(1, 4, 4), (5, 12, 2), (13, 16, 0)]
    greedy = Sampling(temperature=0.0, max_tokens=48, ignore_eos=True)
    requests = [RolloutRequest(i, 0, p, greedy) for i, p in enumerate(task_prompts(4, 1))]
    script = [4] * 5 + [1] * 5 + [0]
    run = engine.run_steps(requests, controller=_Script(engine, script))
    k = [r.draft_len for r in run.steps]
    # Step s proposes the drafts its K says; vLLM verifies (and reports) them in step s + 1.
    assert k[1:6] == [4] * 5 and k[6:11] == [1] * 5 and set(k[11:]) == {0}, k
    assert all(r.num_drafts == 0 for r in run.steps[11:])
    assert [r.chosen_k for r in run.steps[:12]] == script + [0]
    assert engine.current_draft_lengths() == [(1, 16, 0)]
    engine.set_draft_lengths([(1, 4, 2), (9, 99, 1)])  # uncovered batch sizes: SD off
    assert engine.current_draft_lengths() == [(1, 4, 2), (5, 8, 0), (9, 16, 1)]
    with pytest.raises(EngineConfigError, match="num_speculative_tokens"):
        engine.set_draft_lengths([(1, 16, 5)])
    with pytest.raises(EngineConfigError, match="overlaps"):
        engine.set_draft_lengths([(1, 8, 2), (8, 16, 1)])
    # a refused table changes nothing
    assert engine.current_draft_lengths() == [(1, 4, 2), (5, 8, 0), (9, 16, 1)]


@pytest.fixture(scope="module")
def bandit_run(engine, task_prompts):
    """Greedy responses with SD off (the reference), then the same requests under a
    BanditController."""
    prompts = task_prompts(12, 7)
    greedy = Sampling(temperature=0.0, max_tokens=160)
    engine.set_draft_lengths([(1, MAX_NUM_SEQS, 0)])  # no SD
    before = engine.spec_counters()
    reference = [r.samples[0].token_ids for r in engine.generate(prompts, 1, greedy)]
    assert (engine.spec_counters() - before).num_drafts == 0
    controller = BanditController(engine, seed=0)
    requests = [RolloutRequest(i, 0, p, greedy) for i, p in enumerate(prompts)]
    run = engine.run_steps(requests, controller=controller)
    return reference, run, controller


@pytest.mark.needs_vllm
@pytest.mark.needs_reference
def test_bandit_controller_keeps_greedy_output_exact(bandit_run):
    reference, run, controller = bandit_run
    outputs = [run.outputs[f"p{i}-s0"].token_ids for i in range(len(reference))]
    assert outputs == reference, (
        "greedy decoding under bandit-chosen draft lengths must equal no SD"
    )
    assert sum(r.num_drafts for r in run.steps) > 0
    print(f"controller overhead {1e6 * controller.overhead_s / len(run.steps):.1f} us/step over "
          f"{len(run.steps)} steps ({1e3 * run.wall_s / len(run.steps):.2f} ms/step)")


@pytest.mark.needs_vllm
@pytest.mark.needs_reference
def test_bandit_controller_choices_reach_vllm_and_the_bandit_learns(bandit_run, engine):
    _, run, controller = bandit_run
    pulls = dict(controller.bandit.counts)
    assert len({k for (_, k), n in pulls.items() if n > 0}) > 1, pulls
    chosen = [r.chosen_k for r in run.steps]
    assert len(set(chosen)) > 1
    # The K chosen for a step is the K vLLM verifies in the next one (none when it is 0).
    for row, nxt in zip(run.steps, run.steps[1:]):
        if row.chosen_k == 0:
            assert nxt.num_drafts == 0
        elif nxt.num_drafts > 0:
            assert nxt.draft_len == row.chosen_k
    # Above the threshold (12) SD stays off.
    assert all(r.chosen_k == 0 for r in run.steps if r.batch_size > 12)
    # A checkpoint resumes onto the engine: the table is the saved one.
    state = json.loads(json.dumps(controller.state_dict()))
    resumed = BanditController(engine, seed=1)
    resumed.load_state_dict(state)
    assert engine.current_draft_lengths() == _merged(controller.rows())
    assert resumed.bandit.counts == pulls
    assert (resumed.k, resumed.since, resumed.stints) == (
        controller.k,
        controller.since,
        controller.stints,
    )


def _merged(rows):
    out = []
    for lo, hi, k in rows:
        if out and out[-1][2] == k and out[-1][1] + 1 == lo:
            out[-1] = (out[-1][0], hi, k)
        else:
            out.append((lo, hi, k))
    return out
