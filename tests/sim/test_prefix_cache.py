"""The engine's prefix cache: a later turn prefills only what is not cached, and a cache too small
for everything evicts the least recently used prefix (never a running turn's)."""

from __future__ import annotations

import pytest

from sim.prefix_cache import PrefixCache
from sim.simulator import simulate
from workbench.contracts.policy import load_policy


def test_a_second_turn_finds_its_first_turn_cached():
    c = PrefixCache()
    assert c.admit("a", "g", prompt=100, context=100) == 0  # nothing cached yet
    c.release("a", context=110)  # the turn generated 10 tokens: cached with the prompt
    # the tool appended 50: the next turn's context is 160, of which 110 are cached
    assert c.admit("a", "g", prompt=100, context=160) == 110


def test_a_sibling_finds_the_shared_prompt_cached_and_only_that():
    c = PrefixCache()
    c.admit("a", "g", 100, 100)
    assert c.admit("b", "g", 100, 100) == 100
    assert c.admit("c", "other", 100, 100) == 0
    unshared = PrefixCache(shared_prompt=False)
    unshared.admit("a", "g", 100, 100)
    assert unshared.admit("b", "g", 100, 100) == 0


def test_a_small_cache_evicts_the_least_recently_used_prefix_and_never_a_running_one():
    c = PrefixCache(capacity=250)
    c.admit("a", "ga", 100, 100)
    c.release("a", 110)  # a waits on its tool: 110 cached, evictable
    c.admit("b", "gb", 100, 100)
    c.release("b", 120)  # b too, more recently
    c.admit("d", "gd", 100, 100)  # d runs: 330 tokens wanted, 250 fit
    assert c.used <= 250
    assert c.cached("a", "ga", 100) == 0  # the oldest prefix went, prompt and all
    assert c.cached("d", "gd", 100) == 100  # the running turn stays
    assert c.evicted == pytest.approx(330 - c.used)
    # a's next turn prefills its whole context again
    assert c.admit("a", "ga", 100, 160) == 0


def test_room_refuses_a_turn_beside_pinned_ones_past_the_capacity():
    c = PrefixCache(capacity=150)
    assert c.room("a", "ga", 100, 100)
    c.admit("a", "ga", 100, 100)
    assert not c.room("b", "gb", 100, 100)  # 200 pinned would not fit
    assert c.room("b", "ga", 100, 140)  # a sibling shares the pinned prompt: 140 in all
    c.release("a", 110)
    assert c.room("b", "gb", 100, 100)  # nothing pinned: a turn is always admitted


def test_the_simulator_prefills_only_the_new_tokens_of_a_later_turn(agentic_workload,
                                                                   simple_profile):
    # prompt 100; turn 0 writes 10, its tool appends 50; turn 1 writes 10
    wl = agentic_workload([[(100, [(10, 50, 0.5), (10, 0, 0.0)])]])
    run = simulate(wl, load_policy("baseline"), simple_profile(), seed=0)
    t = run.turns.sort_values("turn")
    assert t["prompt_tokens"].tolist() == [100, 160]
    assert t["cached_tokens"].tolist() == [0, 110]


def test_a_small_cache_makes_a_later_turn_prefill_again(agentic_workload, simple_profile):
    """Two trajectories; b's long second turn runs while a waits on a slow tool: with room for
    both, a's next turn finds its prefix; with room for little more than one, b's growth evicts
    it and a pays the prefill again."""
    groups = [[(100, [(10, 50, 5.0), (10, 0, 0.0)])], [(100, [(10, 50, 0.1), (400, 0, 0.0)])]]
    prof = simple_profile(step_s=0.01, prefill_s=0.001)
    runs = {}
    for cap in (0, 300):
        wl = agentic_workload(groups, cache_tokens=cap)
        runs[cap] = simulate(wl, load_policy("baseline"), prof, seed=0)
    a_turn1 = {cap: r.turns.query("group == 0 and turn == 1").iloc[0] for cap, r in runs.items()}
    assert a_turn1[0]["cached_tokens"] == 110
    assert a_turn1[300]["cached_tokens"] < 110
    assert runs[300].steps[0].rollout_time_s > runs[0].steps[0].rollout_time_s
