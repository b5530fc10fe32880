"""What the drafter trains on: a sequence's tokens and the target's hidden states over them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass
class HiddenRecord:
    """One sequence the drafter trains on (the GRPO update's forward pass yields them at no extra
    cost)."""

    token_ids: list[int]  # prompt + response
    # [len(token_ids), hidden_size] float32 torch tensor, detached, CPU: the target's final-norm
    # hidden states (`model.model(...).last_hidden_state`), i.e. what vLLM hands an EAGLE drafter.
    hidden: Any
    # [len(token_ids), n * hidden_size]: the residual streams entering the target layers an EAGLE-3
    # head reads (its aux layers, concatenated in their order); None for an EAGLE head.
    aux: Any = None


def drafter_states(hidden_states: Sequence[Any], aux_layers: Sequence[int]) -> Any:
    """A transformers forward's `hidden_states` (embeddings, then each layer's output; the last
    entry after the final norm) -> the final-norm states, with the `aux_layers` entries
    concatenated after them when there are any (`split_states` undoes it)."""
    import torch

    last = hidden_states[-1]
    if not aux_layers:
        return last
    return torch.cat([last, *(hidden_states[i] for i in aux_layers)], dim=-1)


def split_states(token_ids: list[int], states: Any, hidden_size: int) -> HiddenRecord:
    """The record of `drafter_states`' output for one sequence."""
    aux = states[:, hidden_size:] if states.shape[-1] > hidden_size else None
    return HiddenRecord(token_ids, states[:, :hidden_size].clone(),
                        None if aux is None else aux.clone())
