"""A held batch's prompts: task problems rendered through the model's chat template, as deep into
a conversation as the cell's context.

A prompt of `context` tokens is earlier problems answered (user and assistant turns, in the chat
template when the tokenizer has one, else the problems' raw text one after another), then the
current problem, then the first part of its reference solution (the assistant's turn under way),
so the model continues text of its own kind and a drafter is judged where a rollout would be.
The solution is cut so that `reserve` of its tokens are left to decode. Raw text reaches the
context exactly (the earliest problem's start cut off); in a chat template, or for a task without
solutions, whole turns reach the nearest count below it. Every prompt of a cell
starts from another problem, so the batch's requests differ.
"""

from __future__ import annotations

from typing import Any, Sequence

# Problems drawn per sweep: enough that 256 requests start from different ones.
POOL = 512


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def _head(tokenizer: Any, history: Sequence[Any], current: Any, chat: bool) -> list[int]:
    """Earlier problems with their answers, then the current problem (the assistant to answer)."""
    if chat:
        msgs = []
        for p in history:
            msgs += [{"role": "user", "content": p.prompt},
                     {"role": "assistant", "content": p.solution or str(getattr(p, "answer", ""))}]
        msgs.append({"role": "user", "content": current.prompt})
        ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # transformers 5: a mapping
    text = "".join(p.prompt + (p.solution or "") + "\n" for p in history) + current.prompt
    return list(tokenizer.encode(text))


def context_prompt(tokenizer: Any, pool: Sequence[Any], current: Any, start: int, context: int,
                   reserve: int, chat: bool) -> list[int]:
    """One prompt of (about) `context` tokens ending in `current`'s partial solution."""
    solution = _encode(tokenizer, current.solution or "")
    avail = max(0, len(solution) - reserve)
    history: list[Any] = []
    head = _head(tokenizer, history, current, chat)
    for i in range(len(pool)):
        if len(head) + avail >= context:
            break
        more = _head(tokenizer, history + [pool[(start + i) % len(pool)]], current, chat)
        if len(more) > context:
            break
        history.append(pool[(start + i) % len(pool)])
        head = more
    if not chat and len(head) + avail < context:
        # Raw text: one more earlier problem, its start cut off, fills the context exactly (a chat
        # template's turns cannot be cut: there the prompt stays the nearest count below).
        more = _head(tokenizer, history + [pool[(start + len(history)) % len(pool)]], current,
                     chat)
        head = more[max(0, len(more) - (context - avail)):]
    return head + solution[:max(0, min(avail, context - len(head)))]


def cell_prompts(tokenizer: Any, pool: Sequence[Any], count: int, context: int,
                 reserve: int) -> list[list[int]]:
    """`count` different prompts at `context` tokens, each leaving `reserve` solution tokens (where
    the task has solutions that long: the longest are the current problems)."""
    chat = has_chat_template(tokenizer)
    lengths = [len(_encode(tokenizer, p.solution or "")) for p in pool]
    long = [p for p, n in sorted(zip(pool, lengths), key=lambda x: -x[1]) if n >= reserve + 8]
    currents = long or list(pool)
    return [context_prompt(tokenizer, pool, currents[j % len(currents)], 7 * j + 1, context,
                           reserve, chat) for j in range(count)]
