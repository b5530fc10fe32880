"""A verify pass's GEMMs on one GPU, by tokens per pass (batch x tokens to verify): the fastest a
wider verify can be on this card, to set beside the measured database's verify (which adds
attention, the all-reduces and the engine's work). Run on a GPU machine:

    python3 traces/measured/verify_gemms.py OUT.json

Shapes: one tensor-parallel rank of Qwen2.5-32B at TP4 (the TLT paper's Table C engine) and of
Llama-3.1-8B at TP1: per layer the QKV, output, gate+up and down projections, times the layers,
plus the LM head once over every token (a verify pass scores each verified position). bf16, random
operands, CUDA graph of the whole pass replayed (no launch gaps), median of 30 replays after 5.
"""

import json
import sys

import torch

SHAPES = {  # name: (hidden, qkv out, attention out, ffn per rank, layers, vocab per rank)
    "qwen2.5-32b-tp4": (5120, (40 + 2 * 8) * 128 // 4, 40 * 128 // 4, 27648 // 4, 64, 152064 // 4),
    "llama3.1-8b-tp1": (4096, (32 + 2 * 8) * 128, 32 * 128, 14336, 32, 128256),
}
TOKENS = (64, 256, 512, 1024, 2048, 4096)


def pass_ms(hidden, qkv, attn, ffn, layers, vocab, m):
    dev, dt = "cuda", torch.bfloat16
    w = [torch.randn(k, n, device=dev, dtype=dt) * 0.02
         for k, n in ((hidden, qkv), (attn, hidden), (hidden, 2 * ffn), (ffn, hidden))]
    head = torch.randn(hidden, vocab, device=dev, dtype=dt) * 0.02
    x = torch.randn(m, hidden, device=dev, dtype=dt)
    a = torch.randn(m, attn, device=dev, dtype=dt)
    f = torch.randn(m, ffn, device=dev, dtype=dt)
    out = [torch.empty(m, n, device=dev, dtype=dt) for n in (qkv, hidden, 2 * ffn, hidden)]
    logits = torch.empty(m, vocab, device=dev, dtype=dt)

    def run():
        for _ in range(layers):
            torch.matmul(x, w[0], out=out[0])
            torch.matmul(a, w[1], out=out[1])
            torch.matmul(x, w[2], out=out[2])
            torch.matmul(f, w[3], out=out[3])
        torch.matmul(x, head, out=logits)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    times = []
    for i in range(35):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        torch.cuda.synchronize()
        if i >= 5:
            times.append(e0.elapsed_time(e1))
    flops = 2 * m * (layers * (hidden * qkv + attn * hidden + hidden * 2 * ffn + ffn * hidden)
                     + hidden * vocab)
    ms = sorted(times)[len(times) // 2]
    return ms, flops / (ms * 1e-3) / 1e12, (max(times) - min(times)) / ms


def main():
    rows = []
    for name, shape in SHAPES.items():
        for m in TOKENS:
            ms, tflops, spread = pass_ms(*shape, m)
            rows.append({"shape": name, "tokens": m, "gemm_ms": round(ms, 3),
                         "tflops": round(tflops, 1), "spread": round(spread, 3)})
            print(f"{name:18s} tokens {m:5d}: {ms:8.3f} ms  {tflops:6.1f} TFLOP/s  "
                  f"(spread {100 * spread:.1f}%)", flush=True)
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}
    with open(sys.argv[1], "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
