"""The synthetic reasoning task: greatest common divisor by repeated subtraction.

A problem asks for gcd(a, b) of two numbers from 10 to 999; the solution works it out one
subtraction per line (Euclid's original algorithm: subtract the smaller number from the
larger until the two are equal), then states the answer::

    Q: gcd(651,217)=?        <- prompt (ends with a newline)
    651-217=434              <- response: one step per line, numbers written with 3 digits
    434-217=217
    217-217=000
    A: 217                   <- the answer line; then end of sequence

The difficulty of a problem is its number of steps (lines): the sum of the partial quotients
of a/b, from 1 (a == b) up; problems are kept to at most `MAX_STEPS` = 80 steps. Each line is
12 tokens (one per character), so a response is 12 * steps + 4 to 6 tokens: 16 to ~970 tokens,
under the 1,024-token response cap (`MAX_RESPONSE_TOKENS`). Problems are drawn by difficulty
first, from a heavy-tailed distribution (P(steps = s) proportional to (s + 4) ** -alpha,
s = 1..80), then uniformly among the pairs with that many steps, so a few problems need many
steps and the response lengths have a real long tail. `MIXES` names the distributions:

    mix      alpha   median  p90  p99  P(steps <= 6)  P(steps >= 40)   use
    default   2.0      5     27   68       60%            5.3%       SFT, RL, reference traces
    easy      3.0      2     10   36       82%            0.8%       a lighter tail
    hard      1.2     12     54   77       35%           17.8%       a heavier tail
    flat       -      40     73   80        7%             51%       every difficulty equally often

Each step depends only on the line before it, so one slip (a wrong borrow, say) makes the
answer wrong while the response goes on in the same form: a model that has learnt the
procedure but not the arithmetic perfectly is right on part of the problems, and its wrong
answers are often longer. With three-digit numbers there are far too many problems to
memorise (about 980,000 ordered pairs).

The pairs are split once, by CRC-32 of the unordered pair, into `train` (7/8) and `test`
(1/8), so evaluation can use problems SFT never saw. Everything here is pure and
deterministic: the same (n, seed, mix, split) gives the same problems on any machine.

The reward is verifiable: `reward(problem, response)` is 1.0 when the response's first answer
line (`A: <integer>`) parses and equals gcd(a, b), else 0.0. The steps are not checked.

Variants (`VARIANTS`): `gcd` is the above. `gcd-styles` is a task whose RL signal changes what
the model writes, for measuring drafter staleness: its SFT solutions come in two styles,
`compact` (`651-217=434`, 3 in 4) and `spaced` (`651 - 217 = 434`, 1 in 4; 16 tokens a line
against 12), and its reward adds a format term to the accuracy term, as DeepSeek-R1's
rule-based reward does: 0.5 for a right answer plus 0.5 for a response in the `spaced` style.
RL then moves the policy from mostly compact to spaced responses, a third longer; a drafter
trained offline on the SFT model's greedy outputs (all compact) has never seen that style.
A spaced solution of more than 63 steps runs past the 1,024-token cap (RL clips it: a cost of
the format on the hardest problems). The two terms are added, not required together: the SFT
model samples a quarter of its responses spaced and gets few of those right, so a reward for
right spaced answers only would leave RL almost no signal. The prompts of a
(n, seed, mix, split) are the same in every variant; only the solutions' style (drawn from
its own seeded stream) and the reward differ. A model records its variant in `training.json`
(`real.tiny.model.variant_of`).
"""

from __future__ import annotations

import math
import random
import re
import zlib
from array import array
from dataclasses import dataclass
from functools import lru_cache

LOW, HIGH = 10, 999           # operands are drawn from LOW..HIGH inclusive
WIDTH = 3                     # digits of every number in a solution line (zero-padded)
MAX_STEPS = 80                # pairs needing more steps are never drawn
MAX_RESPONSE_TOKENS = 1024    # the response cap: every reference solution fits under it
# P(steps = s) ~ (s + OFFSET) ** -alpha; None means uniform over the difficulties.
OFFSET = 4
MIXES: dict[str, float | None] = {"default": 2.0, "easy": 3.0, "hard": 1.2, "flat": None}
SPLITS = ("train", "test", "all")

_ANSWER = re.compile(r"^A:[ \t]*([+-]?\d+)[ \t]*$", re.MULTILINE)
# A solution line per style, as `solve` writes it; `style_of` reads a response's first line.
LINE_FORMATS = {"compact": "{x}-{y}={z}\n", "spaced": "{x} - {y} = {z}\n"}
_FIRST_LINE = {"compact": re.compile(r"^\d+-\d+=\d+$"), "spaced": re.compile(r"^\d+ - \d+ = \d+$")}


@dataclass(frozen=True)
class Variant:
    """A task variant: the mix of solution styles SFT teaches, and the reward's format term:
    `format_weight` of the reward is for writing in a `rewarded` style, the rest for a right
    answer."""

    name: str
    styles: tuple[tuple[str, float], ...]  # (style, share of SFT solutions)
    # the styles the format term pays for (empty: no format term)
    rewarded: tuple[str, ...] = ()
    format_weight: float = 0.0


VARIANTS: dict[str, Variant] = {
    "gcd": Variant("gcd", (("compact", 1.0),)),
    "gcd-styles": Variant("gcd-styles", (("compact", 0.75), ("spaced", 0.25)), ("spaced",), 0.5),
}


def variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise ValueError(f"task variant {name!r}: allowed: {', '.join(VARIANTS)}")
    return VARIANTS[name]


@dataclass(frozen=True)
class Problem:
    """One problem: `prompt` is what the model sees; `solution` the reference response
    (without the end-of-sequence token); `answer` gcd(a, b); `difficulty` the number of
    subtraction steps (lines) in the solution."""

    prompt: str
    solution: str
    answer: int
    difficulty: int
    a: int
    b: int
    style: str = "compact"


def prompt_for(a: int, b: int) -> str:
    return f"Q: gcd({a},{b})=?\n"


def solve(a: int, b: int, style: str = "compact") -> tuple[str, int, int]:
    """The reference solution of gcd(a, b) in `style`: (text, answer, steps)."""
    if not (0 < a < 10 ** WIDTH and 0 < b < 10 ** WIDTH):
        raise ValueError(f"gcd({a},{b}): operands must be 1..{10 ** WIDTH - 1}")
    if style not in LINE_FORMATS:
        raise ValueError(f"style {style!r}: allowed: {', '.join(LINE_FORMATS)}")
    x, y = max(a, b), min(a, b)
    w, line = WIDTH, LINE_FORMATS[style]
    lines = []
    while True:
        z = x - y
        lines.append(line.format(x=f"{x:0{w}d}", y=f"{y:0{w}d}", z=f"{z:0{w}d}"))
        if z == 0:
            break
        x, y = max(z, y), min(z, y)
    return "".join(lines) + f"A: {y}", y, len(lines)


def steps_of(a: int, b: int) -> int:
    """Number of subtraction steps for gcd(a, b): the sum of the partial quotients of a/b."""
    x, y, n = max(a, b), min(a, b), 0
    while y:
        n += x // y
        x, y = y, x % y
    return n


def make_problem(a: int, b: int, style: str = "compact") -> Problem:
    text, answer, steps = solve(a, b, style)
    return Problem(
        prompt=prompt_for(a, b),
        solution=text,
        answer=answer,
        difficulty=steps,
        a=a,
        b=b,
        style=style,
    )


def split_of(a: int, b: int) -> str:
    """'test' for about 1/8 of the unordered pairs (CRC-32 of "lo,hi"), else 'train'."""
    lo, hi = min(a, b), max(a, b)
    return "test" if zlib.crc32(f"{lo},{hi}".encode()) % 8 == 0 else "train"


@lru_cache(maxsize=None)
def _pairs_by_steps(split: str) -> dict[int, array]:
    """Difficulty -> the ordered pairs (a, b) of `split` with that many steps, as a * 1000 + b."""
    out: dict[int, array] = {}
    for hi in range(LOW, HIGH + 1):
        for lo in range(LOW, hi + 1):
            if split != "all" and split_of(lo, hi) != split:
                continue
            s = steps_of(hi, lo)
            if s <= MAX_STEPS:
                arr = out.setdefault(s, array("i"))
                arr.append(hi * 1000 + lo)
                if lo != hi:
                    arr.append(lo * 1000 + hi)
    return {s: array("i", sorted(v)) for s, v in sorted(out.items())}


def difficulty_pmf(mix: str = "default") -> dict[int, float]:
    """P(steps = s) for s = 1..MAX_STEPS under a named mix."""
    if mix not in MIXES:
        raise ValueError(f"mix {mix!r}: allowed: {', '.join(MIXES)}")
    alpha = MIXES[mix]
    w = {s: 1.0 if alpha is None else (s + OFFSET) ** -alpha for s in range(1, MAX_STEPS + 1)}
    total = math.fsum(w.values())
    return {s: v / total for s, v in w.items()}


def make_problems(n: int, seed: int = 0, mix: str = "default", split: str = "all",
                  variant_name: str = "gcd") -> list[Problem]:
    """`n` problems drawn for `seed` under difficulty mix `mix` from the pairs of `split`, their
    solutions in styles drawn from `variant_name`'s SFT mix.

    A difficulty is drawn from the mix, then a pair uniformly among the split's pairs with
    that many steps (each split has hundreds for every difficulty; were one missing, the
    nearest available difficulty would be used, the smaller on a tie). The first call builds
    an index of all pairs (~1 s).
    """
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: allowed: {', '.join(SPLITS)}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    pmf = difficulty_pmf(mix)
    pool = _pairs_by_steps(split)
    avail = sorted(pool)
    levels, weights = list(pmf), list(pmf.values())
    styles, shares = zip(*variant(variant_name).styles)
    rng = random.Random(f"gcd-task/{seed}/{mix}/{split}")
    # Styles from their own stream, so that every variant draws the same prompts.
    style_rng = random.Random(f"gcd-style/{seed}/{mix}/{split}/{variant_name}")
    out = []
    for _ in range(n):
        s = rng.choices(levels, weights)[0]
        if s not in pool:
            s = min(avail, key=lambda t: (abs(t - s), t))
        code = pool[s][rng.randrange(len(pool[s]))]
        out.append(make_problem(code // 1000, code % 1000, style_rng.choices(styles, shares)[0]))
    return out


def parse_answer(response: str) -> int | None:
    """The integer on the response's first answer line (`A: 13`), or None when there is none."""
    m = _ANSWER.search(response)
    return int(m.group(1)) if m else None


def style_of(response: str) -> str | None:
    """The style of the response's first line, or None when it is in neither."""
    first = response.split("\n", 1)[0]
    return next((name for name, pat in _FIRST_LINE.items() if pat.match(first)), None)


def reward(problem: Problem, response: str, variant_name: str = "gcd") -> float:
    """The plain task: 1.0 when the response's answer parses and is right, else 0.0. A variant
    with a format term: (1 - w) for a right answer plus w for a response in a rewarded style."""
    v = variant(variant_name)
    right = 1.0 if parse_answer(response) == problem.answer else 0.0
    styled = 1.0 if style_of(response) in v.rewarded else 0.0
    return (1.0 - v.format_weight) * right + v.format_weight * styled


def answer_reward(response: str, answer: str) -> float:
    """The plain task's reward against a task file's answer
    (`tlt train --reward real.tiny.task:answer_reward`):
    1.0 when the response's first answer line parses and equals `answer`, else 0.0."""
    return 1.0 if parse_answer(response) == int(answer) else 0.0
