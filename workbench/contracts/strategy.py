"""How one verify pass speculates (`Strategy`: a chain or a tree) and the schedule's rows that
pick it per batch-size bucket (`ScheduleBucket`), as a policy file writes them
(workbench/contracts/policy.py holds the policy around them)."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.contracts.schema import FieldError, require

MAX_DRAFT_STEPS = 32
MAX_TOPK = 16
MAX_VERIFY_TOKENS = 512


@dataclass(frozen=True)
class Strategy:
    """How one verify pass speculates: `steps` drafter steps, keeping the `topk` best candidates
    per step, and verifying `tokens` tokens per sequence (SGLang/FastRL's `steps_topk_tokens`,
    e.g. 8_4_48; `tokens` counts the position the target predicts itself, as SGLang's
    `speculative_num_draft_tokens` does). A chain (vLLM's method) is top-k 1: K drafted tokens
    verify K + 1 positions. Steps 0 is no speculation."""

    steps: int
    topk: int = 1
    tokens: int = 0  # 0: a chain's steps + 1

    def __post_init__(self) -> None:
        if self.tokens == 0:  # one form per strategy, so equal strategies compare equal
            object.__setattr__(self, "tokens", self.steps + 1)

    @classmethod
    def chain(cls, steps: int) -> "Strategy":
        return cls(steps)

    @classmethod
    def parse(cls, value: "int | str | Strategy") -> "Strategy":
        """A chain from its length (4 or "4"), or a tree from "steps_topk_tokens" ("8_4_48")."""
        if isinstance(value, Strategy):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls.chain(value)
        parts = str(value).strip().split("_")
        if not all(p.isdigit() for p in parts) or len(parts) not in (1, 3):
            raise ValueError(f"{value!r} is not a draft length (e.g. 4) or a steps_topk_tokens "
                             "tree (e.g. 8_4_48)")
        if len(parts) == 1:
            return cls.chain(int(parts[0]))
        return cls(int(parts[0]), int(parts[1]), int(parts[2]))

    @property
    def verify_tokens(self) -> int:
        """Positions verified per sequence in one target forward (1 without speculation)."""
        return self.tokens

    @property
    def depth(self) -> int:
        """The longest run of drafts a pass can accept: the tree's depth, cut by what is
        verified."""
        return min(self.steps, self.verify_tokens - 1)

    @property
    def is_chain(self) -> bool:
        return self.topk == 1

    @property
    def name(self) -> str:
        if self.is_chain:
            return str(self.steps)
        return f"{self.steps}_{self.topk}_{self.verify_tokens}"

    def check(self) -> None:
        require(0 <= self.steps <= MAX_DRAFT_STEPS, "steps", self.steps,
                f"draft steps from 0 to {MAX_DRAFT_STEPS}")
        require(1 <= self.topk <= MAX_TOPK, "topk", self.topk, f"an integer from 1 to {MAX_TOPK}")
        if self.steps == 0:
            require(self.topk == 1 and self.tokens == 1, "tokens", self.tokens,
                    "0 or 1 when steps is 0 (no SD)")
            return
        if self.is_chain:
            require(
                self.tokens == self.steps + 1,
                "tokens",
                self.tokens,
                f"0 or steps + 1 ({self.steps + 1}) for a chain (top-k 1 verifies its drafts and "
                "one more position)",
            )
            return
        # A tree of `steps` levels keeps top-k nodes at the first level and top-k^2 candidates
        # after.
        most = 1 + self.topk + (self.steps - 1) * self.topk**2
        # Fewer tokens than steps + 1 is allowed (FastRL's 8_4_8): the verified tree is then
        # shallower.
        require(2 <= self.tokens <= min(most, MAX_VERIFY_TOKENS), "tokens", self.tokens,
                f"from 2 to {min(most, MAX_VERIFY_TOKENS)} for a {self.steps}-step top-{self.topk} "
                "tree")


@dataclass(frozen=True)
class ScheduleBucket:
    """One batch-size bucket: vLLM's `num_speculative_tokens_per_batch_size` row (min_batch,
    max_batch, draft_len), and optionally a tree: `topk` > 1 and `tokens` to verify."""

    min_batch: int
    max_batch: int
    draft_len: int  # draft steps (a chain's length, a tree's depth); 0 = SD off
    topk: int = 1
    tokens: int = 0  # tokens verified per sequence; 0: a chain's draft_len + 1

    ROW_HELP = (
        'a [min_batch, max_batch, draft_len] row, a [min_batch, max_batch, "steps_topk_tokens"] '
        'row '
        '(e.g. [1, 1, "8_4_48"], quoted: YAML reads 8_4_48 as the number 8448), or a mapping with '
        'those fields'
    )

    @classmethod
    def from_row(cls, row: list | tuple) -> dict:
        if len(row) != 3:
            raise ValueError(row)
        s = Strategy.parse(row[2])
        tree = {} if s.is_chain else {"topk": s.topk, "tokens": s.tokens}
        return {"min_batch": row[0], "max_batch": row[1], "draft_len": s.steps, **tree}

    @property
    def strategy(self) -> Strategy:
        return Strategy(self.draft_len, self.topk, self.tokens)

    def check(self) -> None:
        require(self.min_batch >= 1, "min_batch", self.min_batch, "an integer >= 1")
        require(
            self.max_batch >= self.min_batch, "max_batch", self.max_batch,
            f"an integer >= min_batch ({self.min_batch})"
        )
        require(0 <= self.draft_len <= MAX_DRAFT_STEPS, "draft_len", self.draft_len,
                f"an integer from 0 to {MAX_DRAFT_STEPS} (a tree strategy is a quoted "
                "\"steps_topk_tokens\" string)")
        s = self.strategy
        try:
            s.check()
        except FieldError as exc:
            raise FieldError("draft_len" if exc.field == "steps" else exc.field, exc.value,
                             exc.allowed) from None
