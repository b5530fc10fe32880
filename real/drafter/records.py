"""What the drafter trains on: a sequence's tokens and the target's hidden states over them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class HiddenRecord:
    """One sequence the drafter trains on (the GRPO update's forward pass yields them at no extra
    cost)."""

    token_ids: list[int]  # prompt + response
    # [len(token_ids), hidden_size] float32 torch tensor, detached, CPU: the target's final-norm
    # hidden states (`model.model(...).last_hidden_state`), i.e. what vLLM hands an EAGLE drafter.
    hidden: Any
