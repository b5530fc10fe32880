"""Bandits: the draft-length choosers shared by the simulator and the real engine."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from workbench.contracts.bandit import (
    BEGMAB,
    SD_OFF_BUCKET,
    Climb,
    StepReward,
    UCB1,
    Arm,
    EpsilonGreedy,
    FixedTable,
    make_bandit,
)
from workbench.contracts.policy import (
    BanditConfig,
    DrafterConfig,
    Policy,
    ScheduleBucket,
)

SCHEDULE = (ScheduleBucket(1, 8, 4), ScheduleBucket(9, 32, 2))


def make_policy(algorithm: str, arms=(0, 2, 4, 6), epsilon: float = 0.1, window: int = 32,
                schedule=SCHEDULE, sd_threshold: int = 32) -> Policy:
    p = Policy(name=f"test-{algorithm}", sd_threshold=sd_threshold, schedule=schedule,
               bandit=BanditConfig(algorithm=algorithm, arms=arms, epsilon=epsilon, window=window),
               drafter=DrafterConfig(kind="ngram"))
    p.check()
    return p


def test_make_bandit_builds_the_configured_algorithm():
    assert isinstance(make_bandit(make_policy("fixed"), 0), FixedTable)
    assert isinstance(make_bandit(make_policy("beg"), 0), BEGMAB)
    assert isinstance(make_bandit(make_policy("ucb1"), 0), UCB1)
    assert isinstance(make_bandit(make_policy("egreedy"), 0), EpsilonGreedy)
    assert isinstance(make_bandit(make_policy("climb"), 0), Climb)


def _run(bandit, batch, means, pulls, rng, noise=0.3):
    chosen = []
    for _ in range(pulls):
        arm = bandit.select(batch)
        chosen.append(arm.draft_len)
        bandit.update(arm, means[arm.draft_len] + noise * rng.standard_normal())
    return chosen


def test_beg_finds_the_best_arm_and_keeps_exploring_at_epsilon():
    eps = 0.1
    policy = make_policy("beg", epsilon=eps)
    bandit = make_bandit(policy, 42)
    means = {0: 1.0, 2: 1.5, 4: 2.0, 6: 1.2}
    rng = np.random.default_rng(0)
    warmup = _run(bandit, 4, means, 200, rng)
    chosen = _run(bandit, 4, means, 8000, rng)
    counts = Counter(chosen)
    assert counts.most_common(1)[0][0] == 4
    n_arms = len(policy.bandit.arms)
    expected = eps * (n_arms - 1) / n_arms  # a random pull hits a non-best arm
    non_greedy = 1 - counts[4] / len(chosen)
    assert non_greedy == pytest.approx(expected, abs=0.015)
    # Every arm keeps being explored.
    assert all(counts[a] > 0.5 * eps / n_arms * len(chosen) for a in policy.bandit.arms)
    assert bandit.counts[(0, 4)] == Counter(warmup)[4] + counts[4]


@pytest.mark.parametrize("eps", [0.0, 0.3])
def test_beg_exploration_rate_follows_epsilon(eps):
    policy = make_policy("beg", epsilon=eps)
    bandit = make_bandit(policy, 1)
    means = {0: 1.0, 2: 1.5, 4: 2.0, 6: 1.2}
    rng = np.random.default_rng(1)
    _run(bandit, 4, means, 200, rng)
    chosen = _run(bandit, 4, means, 6000, rng)
    non_greedy = 1 - Counter(chosen)[4] / len(chosen)
    assert non_greedy == pytest.approx(eps * 3 / 4, abs=0.02)


def test_beg_buckets_learn_separately():
    bandit = make_bandit(make_policy("beg", epsilon=0.05), 7)
    # Small batches: long drafts pay; larger batches: short ones.
    means = {0: {0: 1.0, 2: 1.6, 4: 2.2, 6: 2.8}, 1: {0: 1.3, 2: 2.0, 4: 1.5, 6: 1.0}}
    rng = np.random.default_rng(2)
    chosen = {0: [], 1: []}
    for i in range(8000):
        batch = 3 if i % 2 == 0 else 20
        arm = bandit.select(batch)
        assert arm.bucket == (0 if batch == 3 else 1)
        chosen[arm.bucket].append(arm.draft_len)
        bandit.update(arm, means[arm.bucket][arm.draft_len] + 0.3 * rng.standard_normal())
    # Judged on the later pulls: an unlucky first sample can hold epsilon-greedy on a
    # worse arm until exploration samples the best one again.
    late = {b: Counter(c[-2000:]) for b, c in chosen.items()}
    assert late[0].most_common(1)[0][0] == 6
    assert late[1].most_common(1)[0][0] == 2
    assert late[0][6] > 0.9 * 2000
    assert late[1][2] > 0.9 * 2000


def test_beg_window_forgets_old_rewards():
    """After the best arm changes, a windowed bandit follows within a few windows."""
    bandit = make_bandit(make_policy("beg", epsilon=0.2, window=16), 3)
    rng = np.random.default_rng(3)
    _run(bandit, 4, {0: 1.0, 2: 1.5, 4: 2.0, 6: 1.2}, 3000, rng)
    chosen = _run(bandit, 4, {0: 1.0, 2: 3.0, 4: 2.0, 6: 1.2}, 3000, rng)
    assert Counter(chosen[-1000:]).most_common(1)[0][0] == 2


@pytest.mark.parametrize("algorithm", ["fixed", "beg", "ucb1", "egreedy", "climb"])
def test_above_the_threshold_sd_is_off_and_rewards_are_ignored(algorithm):
    bandit = make_bandit(make_policy(algorithm), 5)
    rng = np.random.default_rng(5)
    _run(bandit, 4, {0: 1.0, 2: 1.5, 4: 2.0, 6: 1.2}, 50, rng)
    before = dict(bandit.counts)
    for batch in (33, 64, 256):
        arm = bandit.select(batch)
        assert arm == Arm(SD_OFF_BUCKET, 0)
        bandit.update(arm, 1e9)
    assert bandit.counts == before
    # A huge reward on the SD-off arm changed nothing about the choice below the threshold.
    if algorithm != "fixed":
        picks = Counter(_run(bandit, 4, {0: 1.0, 2: 1.5, 4: 2.0, 6: 1.2}, 500, rng))
        assert picks.most_common(1)[0][0] == 4


def test_at_the_threshold_sd_is_still_on():
    bandit = make_bandit(make_policy("fixed"), 0)
    assert bandit.select(32) == Arm(1, 2)
    assert bandit.select(33) == Arm(SD_OFF_BUCKET, 0)


def test_sd_off_everywhere_when_policy_does_not_use_sd():
    # No drafter: SD is off whatever the schedule says.
    no_drafter = Policy(name="nosd", sd_threshold=0, drafter=DrafterConfig(kind="none"))
    assert make_bandit(no_drafter, 0).select(1) == Arm(SD_OFF_BUCKET, 0)
    # A drafter but threshold 0: SD is off at every batch size, for every algorithm.
    for algorithm in ("fixed", "beg", "ucb1", "egreedy", "climb"):
        pol = Policy(name="off", sd_threshold=0, schedule=SCHEDULE,
                     bandit=BanditConfig(algorithm=algorithm), drafter=DrafterConfig(kind="eagle"))
        bandit = make_bandit(pol, 0)
        assert all(bandit.select(b) == Arm(SD_OFF_BUCKET, 0) for b in (1, 8, 32))


def _ucb_regret(T: int, probs: dict[int, float], seed: int) -> np.ndarray:
    bandit = make_bandit(make_policy("ucb1", arms=tuple(probs)), seed)
    rng = np.random.default_rng(seed + 100)
    best = max(probs.values())
    regret = np.empty(T)
    total = 0.0
    for t in range(T):
        arm = bandit.select(4)
        total += best - probs[arm.draft_len]
        regret[t] = total
        bandit.update(arm, float(rng.random() < probs[arm.draft_len]))
    return regret


def test_ucb1_regret_grows_sublinearly():
    probs = {0: 0.3, 2: 0.5, 4: 0.7, 6: 0.6}
    regret = _ucb_regret(20_000, probs, seed=11)
    r_short, r_long = regret[2_000 - 1], regret[-1]
    assert r_short > 0
    assert r_long / r_short < 4, (r_short, r_long)
    # Regret per pull in the second half is far below a uniform player's.
    uniform_rate = np.mean([max(probs.values()) - p for p in probs.values()])
    assert (regret[-1] - regret[10_000]) / 10_000 < 0.2 * uniform_rate


def test_ucb1_buckets_learn_separately():
    bandit = make_bandit(make_policy("ucb1"), 9)
    means = {0: {0: 0.2, 2: 0.4, 4: 0.6, 6: 0.9}, 1: {0: 0.5, 2: 0.9, 4: 0.4, 6: 0.1}}
    rng = np.random.default_rng(9)
    for i in range(6000):
        arm = bandit.select(3 if i % 2 == 0 else 20)
        bandit.update(arm, means[arm.bucket][arm.draft_len] + 0.1 * rng.standard_normal())
    pulls = dict(bandit.counts)
    assert max((pulls[(0, a)], a) for a in (0, 2, 4, 6))[1] == 6
    assert max((pulls[(1, a)], a) for a in (0, 2, 4, 6))[1] == 2


def test_epsilon_greedy_pools_all_batch_sizes():
    means = {0: 1.0, 2: 1.5, 4: 2.0, 6: 3.0}
    rng = np.random.default_rng(4)
    eg = make_bandit(make_policy("egreedy", epsilon=0.05), 4)
    # Learn only at batch 20 (bucket 1)...
    _run(eg, 20, means, 2000, rng)
    assert {bucket for bucket, _ in eg.counts} == {0}  # one pool
    # ...and the choice at batch 3 (bucket 0) already knows the best arm.
    picks = Counter(eg.select(3).draft_len for _ in range(1000))
    assert picks[6] > 900
    # BEG-MAB does not: bucket 0 is still untried, so it tries its arms first.
    beg = make_bandit(make_policy("beg", epsilon=0.05), 4)
    _run(beg, 20, means, 2000, rng)
    assert beg.select(3) == Arm(0, 0)


def test_fixed_table_returns_the_schedule():
    schedule = (ScheduleBucket(1, 1, 6), ScheduleBucket(2, 4, 4), ScheduleBucket(5, 16, 3),
                ScheduleBucket(17, 32, 0))
    policy = make_policy("fixed", schedule=schedule, sd_threshold=24)
    bandit = make_bandit(policy, 0)
    for batch in range(1, 65):
        arm = bandit.select(batch)
        if batch > 24:
            assert arm == Arm(SD_OFF_BUCKET, 0)
            continue
        row = next(i for i, r in enumerate(schedule) if r.min_batch <= batch <= r.max_batch)
        assert arm == Arm(row, schedule[row].draft_len)
    bandit.update(Arm(0, 6), 123.0)
    assert bandit.select(1) == Arm(0, 6)
    assert bandit.counts == {}


@pytest.mark.parametrize("algorithm", ["beg", "ucb1", "egreedy", "climb"])
def test_same_seed_same_choices(algorithm):
    def run(seed):
        rng = np.random.default_rng(0)
        return _run(
            make_bandit(make_policy(algorithm, epsilon=0.3), seed), 4,
            {0: 1.0, 2: 1.1, 4: 1.05, 6: 1.08}, 500, rng
        )

    assert run(1) == run(1)


@pytest.mark.parametrize("algorithm", ["fixed", "beg", "ucb1", "egreedy", "climb"])
def test_state_dict_round_trip_resumes_the_same_choices(algorithm):
    """A bandit checkpointed (through JSON) and resumed chooses as one never stopped."""
    import json

    policy = make_policy(algorithm, epsilon=0.3, window=8)
    means = {0: 1.0, 2: 1.1, 4: 1.05, 6: 1.08}

    def pulls(bandit, n, rng):
        chosen = []
        for i in range(n):
            arm = bandit.select(3 if i % 3 else 20)  # two buckets
            chosen.append(arm)
            bandit.update(arm, means[arm.draft_len] + 0.3 * rng.standard_normal())
        return chosen

    whole = make_bandit(policy, 1)
    rng = np.random.default_rng(0)
    pulls(whole, 300, rng)
    state = json.loads(json.dumps(whole.state_dict()))
    rng_state = rng.bit_generator.state
    after = pulls(whole, 500, rng)

    resumed = make_bandit(policy, 99)  # another seed: everything must come from the state
    resumed.load_state_dict(state)
    rng.bit_generator.state = rng_state
    assert pulls(resumed, 500, rng) == after
    assert resumed.counts == whole.counts

    other = make_bandit(make_policy(algorithm, arms=(0, 2)), 1)
    with pytest.raises(ValueError, match="arms"):
        other.load_state_dict(state)


def test_climb_starts_at_its_table_then_climbs_to_the_best_neighbour_by_tokens_per_seq_second():
    """Each bucket's first choice is its start; then the untried neighbour of the best arm (the
    longer first), then the best with epsilon 0. Values are mean tokens over median seconds, so one
    slow step moves nothing."""
    bandit = make_bandit(make_policy("climb", arms=(0, 2, 4, 6), epsilon=0.0), 0, start=(2, 0))
    assert bandit.arms == (0, 2, 4, 6) and bandit.start == (2, 0)
    speed = {0: 1.0, 2: 1.6, 4: 2.0, 6: 1.5}  # tokens per sequence per step; every step 10 ms
    chosen = []
    for i in range(8):
        arm = bandit.select(3)
        chosen.append(arm.draft_len)
        for wall in (0.01, 0.01, 0.5 if i == 2 else 0.01):
            bandit.update(arm, StepReward(speed[arm.draft_len], wall, batch=3))
    assert chosen[:4] == [2, 4, 6, 4] and set(chosen[3:]) == {4}
    assert bandit.value(0, 4) == pytest.approx(200.0) and bandit.best(0) == 4
    assert bandit.select(20) == Arm(1, 0)  # the other bucket starts at its own start
    # A segment of several steps joins the window as its mean step.
    bandit.update(Arm(1, 0), StepReward(tokens=8.0, seconds=0.08, batch=20, steps=4))
    assert bandit.value(1, 0) == pytest.approx(2.0 / 0.02)
    with pytest.raises(ValueError, match="2 rows"):
        make_bandit(make_policy("climb"), 0, start=(1, 2, 3))


def test_a_step_reward_is_a_rate_for_the_scalar_bandits():
    """`beg` learns the same from a StepReward as from its tokens per second."""
    a = make_bandit(make_policy("beg", window=4), 1)
    b = make_bandit(make_policy("beg", window=4), 1)
    r = StepReward(tokens=6.0, seconds=0.5, batch=4, steps=2)
    assert r.rate == pytest.approx(48.0)
    for bandit, reward in ((a, r), (b, r.rate)):
        for _ in range(5):
            bandit.update(bandit.select(3), reward)
    assert a.state_dict() == b.state_dict()
