"""The `climb` bandit on engine steps (real/rollout/adaptive.py's BanditController over
workbench/contracts/bandit.py's Climb), driven with hand-made step rows (no vLLM): a toy engine
where each arm's speed per batch size is known, so the test can say what the bandit should end
at."""

from __future__ import annotations

import json

import pytest

from real.rollout.adaptive import BanditController
from real.rollout.requests import EngineStepRow
from workbench.contracts.bandit import BEGMAB, Climb
from workbench.contracts.policy import BanditConfig, DrafterConfig, Policy
from workbench.contracts.strategy import ScheduleBucket

MAX_NUM_SEQS = 32


def _policy(**bandit) -> Policy:
    cfg = dict(
        algorithm="climb",
        arms=(0, 2, 4),
        epsilon=0.1,
        window=16,
        decision_interval=2,
        reward_stat="median",
    )
    pol = Policy(
        name="step",
        sd_threshold=16,
        schedule=(ScheduleBucket(1, 2, 4), ScheduleBucket(3, 8, 2), ScheduleBucket(9, 32, 2)),
        bandit=BanditConfig(**{**cfg, **bandit}),
        drafter=DrafterConfig(kind="eagle"),
    )
    pol.check()
    return pol


class _Engine:
    """What a controller uses of a RolloutEngine, and a toy model of its step times: a step costs
    a fixed 2 ms, 0.1 ms per sequence and token verified, 0.5 ms per draft step; every draft is
    accepted at batch 1-2 (4 drafts: 5 tokens a pass), none above."""

    def __init__(self, max_draft_len: int = 4):
        self.max_draft_len, self.max_num_seqs = max_draft_len, MAX_NUM_SEQS
        self.tables: list[list[tuple[int, int, int]]] = []

    def set_draft_lengths(self, rows):
        self.tables.append(list(rows))

    @staticmethod
    def step(batch: int, verified: int, drafting: int, slow: float = 1.0) -> tuple[int, float]:
        per_seq = 1 + (verified if batch <= 2 else 0)
        wall = (2e-3 + 1e-4 * batch * (1 + verified) + 5e-4 * drafting) * slow
        return batch * per_seq, wall


def _row(batch: int, new_tokens: int, wall_s: float, prefill: int = 0) -> EngineStepRow:
    return EngineStepRow(
        rl_step=0,
        worker=0,
        engine_step=0,
        start_s=0.0,
        wall_s=wall_s,
        batch_size=batch,
        num_waiting=0,
        prefill_requests=prefill,
        prefill_tokens=0,
        decode_requests=batch - prefill,
        scheduled_tokens=batch,
        context_mean=0.0,
        context_max=0,
        draft_len=0,
        num_drafts=0,
        num_draft_tokens=0,
        num_accepted_tokens=0,
        accepted_per_pos=[],
        new_tokens=new_tokens,
    )


def _drive(ctl: BanditController, eng: _Engine, batches, slow=lambda i: 1.0) -> list[EngineStepRow]:
    """Step the toy engine: each step verifies the previous step's K and drafts its own."""
    rows, prev = [], 0
    for i, b in enumerate(batches):
        ctl.before_step(b)
        k = ctl.draft_len_for(b)
        tokens, wall = eng.step(b, prev, k, slow(i))
        row = _row(b, tokens, wall)
        ctl.after_step(row)
        rows.append(row)
        prev = row.chosen_k
    return rows


def test_starts_at_the_given_table_and_sd_stays_off_above_the_threshold():
    eng = _Engine()
    ctl = BanditController(eng, _policy(), seed=0, start=(2, 0, 4))
    assert eng.tables[0] == [(1, 2, 2), (3, 8, 0), (9, 16, 4), (17, 32, 0)]
    rows = _drive(ctl, eng, [20] * 5 + [9] + [1])
    assert [r.chosen_k for r in rows] == [0] * 5 + [4, 2]
    assert ctl.decisions == [(5, 2, 4), (6, 0, 2)]  # each bucket's first step: its start
    with pytest.raises(ValueError, match="3 rows"):
        BanditController(eng, _policy(), start=(1, 2))


def test_learns_from_every_step_that_verified_and_drafted_one_arm_and_nothing_else():
    eng = _Engine()
    ctl = BanditController(eng, _policy(decision_interval=100), seed=0, start=(4, 2, 2))
    ctl.before_step(1)
    ctl.after_step(_row(1, 5, 0.01, prefill=1))  # a prefill step: prompt tokens are no decoding
    assert ctl.learnt == 0
    for wall in (0.010, 0.011, 0.5, 0.012):  # one outlier step (the machine was busy)
        ctl.before_step(1)
        ctl.after_step(_row(1, 5, wall))
    assert ctl.learnt == 4 and ctl.bandit.windows.keys() == {(0, 4)}
    # mean tokens per sequence over the median step time: the outlier moves nothing
    assert ctl.bandit.value(0, 4) == pytest.approx(5 / 0.0115)
    ctl.before_step(4)  # another bucket: its step verified bucket 0's K, so it teaches nothing
    ctl.after_step(_row(4, 4, 0.01))
    assert ctl.learnt == 4
    ctl.before_step(4)
    ctl.after_step(_row(4, 4, 0.01))
    assert ctl.learnt == 5 and ctl.bandit.windows.keys() == {(0, 4), (1, 2)}


def _decode(
    ctl: BanditController, eng: _Engine, phases, slow=lambda i: 1.0
) -> tuple[list[EngineStepRow], float]:
    """Decode phases of (batch, tokens each sequence must advance); returns the rows and the time
    taken without the slow-down (what the choices cost, not the machine's outliers)."""
    rows, prev, clean = [], 0, 0.0
    for b, n in phases:
        done = 0
        while done < n:
            ctl.before_step(b)
            k = ctl.draft_len_for(b)
            tokens, wall = eng.step(b, prev, k)
            row = _row(b, tokens, wall * slow(len(rows)))
            ctl.after_step(row)
            rows.append(row)
            prev, done, clean = row.chosen_k, done + tokens // b, clean + wall
    return rows, clean


def _fixed(eng: _Engine, phases, k_of) -> float:
    total = 0.0
    for b, n in phases:
        tokens, wall = eng.step(b, k_of(b), k_of(b))
        total += -(-n // (tokens // b)) * wall
    return total


def test_finds_the_best_arm_per_bucket_and_turns_sd_off_where_it_loses():
    """A wrong start (SD off at batch 1-2 where 4 drafts pay; K=4 at 3-8 where nothing is
    accepted) is corrected within a few hundred steps, outlier steps notwithstanding, and the
    whole costs little more than the best fixed table."""
    eng = _Engine()
    ctl = BanditController(eng, _policy(), seed=1, start=(0, 4, 2))
    phases = [(6, 60), (2, 200)] * 6
    rows, took = _decode(ctl, eng, phases, slow=lambda i: 20.0 if i % 37 == 0 else 1.0)
    assert ctl.bandit.best(0) == 4 and ctl.bandit.best(1) == 0
    late = rows[-120:]
    share = lambda b, k: (sum(r.chosen_k == k for r in late if r.batch_size == b)  # noqa: E731
                          / sum(r.batch_size == b for r in late))
    assert share(2, 4) >= 0.8 and share(6, 0) >= 0.8  # epsilon 0.1: the rest is exploration
    best = _fixed(eng, phases, lambda b: 4 if b <= 2 else 0)
    assert took < 1.15 * best, (took, best)
    assert took < _fixed(eng, phases, lambda b: 0) and took < _fixed(eng, phases, lambda b: 4)


def test_resumes_from_a_checkpoint_with_the_same_choices():
    eng = _Engine()
    ctl = BanditController(eng, _policy(), seed=2, start=(2, 2, 2))
    _drive(ctl, eng, [1, 1, 5, 5, 5, 2, 7] * 6)
    state, table = json.loads(json.dumps(ctl.state_dict())), ctl.rows()
    later = [5, 5, 1, 1, 1, 7, 2, 2] * 8
    whole = [r.chosen_k for r in _drive(ctl, eng, later)]
    eng2 = _Engine()
    resumed = BanditController(eng2, _policy(), seed=99, start=(0, 0, 0))
    resumed.load_state_dict(state)
    assert eng2.tables[-1] == table
    assert [r.chosen_k for r in _drive(resumed, eng2, later)] == whole
    with pytest.raises(ValueError, match="BEGMAB"):
        resumed.load_state_dict(
            BanditController(_Engine(), _policy(algorithm="beg"), seed=0).state_dict()
        )


def test_the_controller_runs_the_bandit_the_policy_names():
    """`beg` with `reward_stat: median` is BEG-MAB on the real engine as in the simulator; the
    per-step climb runs only where the policy says `climb`. The start table is every bandit's
    table before its first choice."""
    eng = _Engine()
    climb = BanditController(eng, _policy(), start=(4, 2, 0))
    assert isinstance(climb.bandit, Climb) and climb.bandit.start == (4, 2, 0)
    beg = BanditController(eng, _policy(algorithm="beg"), start=(4, 2, 0))
    assert isinstance(beg.bandit, BEGMAB) and beg.k == {0: 4, 1: 2, 2: 0}


def test_climbs_from_the_start_and_leaves_arms_past_a_worse_neighbour_untried():
    """At batch 1-2 every draft is accepted, so the longest chain (4) is best: started there, the
    bandit measures its one neighbour (2), finds it worse, and never spends a stint on SD off
    (epsilon 0: no random tries); started at SD off it climbs 0 -> 2 -> 4."""
    eng = _Engine()
    ctl = BanditController(eng, _policy(epsilon=0.0), seed=0, start=(4, 2, 2))
    _drive(ctl, eng, [1] * 60)
    assert {a for b, a in ctl.bandit.windows if b == 0} == {2, 4} and ctl.bandit.best(0) == 4
    up = BanditController(_Engine(), _policy(epsilon=0.0), seed=0, start=(0, 2, 2))
    rows = _drive(up, _Engine(), [1] * 60)
    assert [k for _, b, k in up.decisions if b == 0][:3] == [0, 2, 4] and rows[-1].chosen_k == 4


# ---------------------------------------------------------------- one bandit, both backends

def _toy_reward(k: int, batch: int) -> tuple[int, float]:
    """A step's tokens per sequence and seconds at draft length k (dyadic: sums are exact)."""
    return (1 + k // 2 if batch <= 2 else 1), (16 + 2 * k + batch) / 1024


@pytest.mark.parametrize(
    "algorithm,stat",
    [
        ("climb", "median"),
        ("climb", "mean"),
        ("beg", "median"),
        ("beg", "mean"),
        ("ucb1", "mean"),
        ("egreedy", "mean"),
    ],
)
def test_the_simulator_and_the_real_engine_make_the_same_choices_from_the_same_rewards(
    algorithm, stat
):
    """The same policy runs the same bandit in both backends: fed the same rewards, the real glue
    (BanditController on engine steps) and the simulator's use (one select and one
    `segment_reward` update per segment of `decision_interval` passes) choose the same arms."""
    import numpy as np

    from sim.entities import Segment, segment_reward
    from workbench.contracts.bandit import make_bandit
    from workbench.contracts.strategy import Strategy

    pol = _policy(algorithm=algorithm, reward_stat=stat, epsilon=0.3, decision_interval=4)
    start, n = (4, 2, 0), pol.bandit.decision_interval
    # one batch per bucket
    blocks = [int(b) for b in np.random.default_rng(0).choice([2, 6, 12], size=80)]

    eng = _Engine(max_draft_len=4)
    ctl = BanditController(eng, pol, seed=7, start=start)
    for b in blocks:
        for _ in range(n):
            ctl.before_step(b)
            tokens, seconds = _toy_reward(ctl.draft_len_for(b), b)
            ctl.after_step(_row(b, tokens * b, seconds))
    real = [(bucket, k) for _, bucket, k in ctl.decisions]

    bandit, sim = make_bandit(pol, 7, start), []
    for b in blocks:
        arm = bandit.select(b)
        tokens, seconds = _toy_reward(arm.draft_len, b)
        seg = Segment(arm, Strategy.chain(arm.draft_len), float(n), float(tokens))
        bandit.update(arm, segment_reward(seg, b, n * seconds))
        sim.append((arm.bucket, arm.draft_len))

    assert real == sim
    assert len({k for _, k in sim}) > 1  # the rewards moved the choices
