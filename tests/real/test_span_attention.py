"""Attention within each sequence of a packed row (real/span_attention.py): what packed GRPO and
drafter training rely on to keep sequences apart, on whichever backend runs it."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from real.span_attention import (  # noqa: E402
    attend,
    backend,
    last_backend,
    packed_spans,
    varlen_kernel,
    varlen_rows,
)

LENGTHS = (5, 1, 12, 7)


def _row(heads=4, kv_heads=2, d=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    bounds, start = [], 0
    for n in LENGTHS:
        bounds.append((start, start + n))
        start += n
    # [1, H, T, D] views of [1, T, H, D], as a model's projections hand them over
    q, k, v = (torch.randn(1, start, h, d, generator=gen).transpose(1, 2)
               for h in (heads, kv_heads, kv_heads))
    return packed_spans(bounds, "cpu"), q, k, v


def _alone(q, k, v, row):
    """Each sequence through scaled-dot-product attention on its own, [1, T, H, D]."""
    rep = q.shape[1] // k.shape[1]
    outs = [F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, s:e].repeat_interleave(rep, 1),
                                           v[:, :, s:e].repeat_interleave(rep, 1), is_causal=True)
            for s, e in row.bounds]
    return torch.cat(outs, dim=2).transpose(1, 2)


def _reference_varlen(q, k, v, cu, max_len, scale):
    """A varlen kernel's contract in plain torch: [T, H, D] rows, sequences at offsets `cu`."""
    assert cu.dtype == torch.int32 and max_len == max(LENGTHS) and q.is_contiguous()
    b = cu.tolist()
    rep = q.shape[1] // k.shape[1]
    heads = [(q[s:e].transpose(0, 1), k[s:e].transpose(0, 1), v[s:e].transpose(0, 1))
             for s, e in zip(b[:-1], b[1:])]
    outs = [F.scaled_dot_product_attention(qs, ks.repeat_interleave(rep, 0),
                                           vs.repeat_interleave(rep, 0), is_causal=True,
                                           scale=scale).transpose(0, 1)
            for qs, ks, vs in heads]
    return torch.cat(outs)


def test_each_sequence_attends_only_to_itself_on_the_cpu():
    row, q, k, v = _row()
    with backend("auto"):
        out = attend(q, k, v, row)
    assert last_backend() == "per-span" and out.shape == (1, sum(LENGTHS), 4, 16)
    assert torch.allclose(out, _alone(q, k, v, row), atol=1e-6)
    # Another sequence's keys and values changed: the first sequence's output is the same.
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 5:], v2[:, :, 5:] = 0.0, 3.0
    assert torch.equal(attend(q, k2, v2, row)[:, :5], out[:, :5])
    with backend("per-span-default"):
        assert torch.allclose(attend(q, k, v, row), out, atol=1e-6)
    assert last_backend() == "per-span-default"


def test_the_varlen_path_hands_the_kernel_rows_and_offsets_and_returns_the_same_attention():
    row, q, k, v = _row()
    out = varlen_rows(q, k, v, row, None, _reference_varlen, torch.float32)
    assert out.shape == (1, sum(LENGTHS), 4, 16)
    assert torch.allclose(out, _alone(q, k, v, row), atol=1e-6)
    assert row.cu_seqlens.tolist() == [0, 5, 6, 18, 25] and row.max_len == 12


def test_this_torchs_varlen_kernel_takes_the_causal_call_and_needs_cuda():
    """The call binds to this torch's `varlen_attn` signature (no TypeError): it reaches the
    FlashAttention operator, which has no CPU kernel."""
    kernel = varlen_kernel()
    if kernel is None:
        pytest.skip(f"torch {torch.__version__} has no torch.nn.attention.varlen")
    row, q, k, v = _row()
    with pytest.raises(NotImplementedError, match="flash_attention"):
        varlen_rows(q, k, v, row, 0.25, kernel, torch.bfloat16)
    with backend("varlen"), pytest.raises(ValueError, match="CUDA only"):
        attend(q, k, v, row)


def test_bad_spans_and_backends_are_refused():
    with pytest.raises(ValueError, match="consecutive"):
        packed_spans([(0, 3), (4, 6)], "cpu")
    with pytest.raises(ValueError, match="consecutive"):
        packed_spans([(0, 3), (3, 3)], "cpu")
    with pytest.raises(ValueError, match="per-span"):
        with backend("dense"):
            pass
    row, q, k, v = _row()
    with pytest.raises(ValueError, match="one packed row of 25"):
        attend(q[:, :, :10], k, v, row)
