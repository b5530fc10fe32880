"""Time the attention of a decode step the way an engine that loops over the batch's sequences does
it (SGLang's `torch_native` backend, which the Search-R1 run's rollout code sets), on a CUDA GPU.

Per layer and per sequence: read the sequence's length (`dev`: a device scalar read back on the
host, as SGLang 0.4.6 slices its token table with it; `host`: from a host list), gather its K and V
rows from the token pool through the table, attend one query over them (scaled_dot_product_attention
with grouped heads), write the output row. Qwen2.5-7B's shapes on one rank of TP2: 14 query heads,
2 KV heads, head size 128, 28 layers, bf16. `batched`: one attention over the whole batch (what a
batched backend pays instead). The slope of a step's time over batches 64-512 is the cost per
sequence per decode step (DecodeCost.per_seq_s), which no kernel database holds.

Run: python3 torch_native_probe.py (about a minute); it prints one JSON line per shape, then the
slopes. This is the program that gave torch_native_probe-h100.txt, laid out for reading.
"""

import json
import time

import torch
import torch.nn.functional as F

L, H, K, D = 28, 14, 2, 128


def T(f, r):
    f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(r):
        f()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / r


def lp(k, v, tb, ln, q, hl):
    o = torch.empty_like(q)
    for i in range(q.shape[0]):
        n = hl[i] if hl else ln[i]
        r = tb[i, :n]
        o[i] = F.scaled_dot_product_attention(
            q[i].unsqueeze(1).unsqueeze(0), k[r].transpose(0, 1).unsqueeze(0),
            v[r].transpose(0, 1).unsqueeze(0), enable_gqa=True)[0, :, 0, :]
    return o


def bt(k, v, tb, q):
    return F.scaled_dot_product_attention(q.unsqueeze(2), k[tb].transpose(1, 2),
                                          v[tb].transpose(1, 2), enable_gqa=True)


def shape(B, C):
    P = B * C
    k = torch.randn(P, K, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    tb = torch.randperm(P, device="cuda").view(B, C)
    ln = torch.full((B,), C, device="cuda")
    q = torch.randn(B, H, D, device="cuda", dtype=torch.bfloat16)
    hl = ln.tolist()
    w = {"dev": lambda: [lp(k, v, tb, ln, q, None) for _ in range(L)],
         "host": lambda: [lp(k, v, tb, ln, q, hl) for _ in range(L)],
         "batched": lambda: [bt(k, v, tb, q) for _ in range(L)]}
    x = {"batch": B, "context": C}
    x.update({n: T(f, 3 if n != "batched" else 10) for n, f in w.items()})
    return x


def main():
    R = []
    for C in (1024, 2048):
        for B in (64, 128, 256, 512):
            R.append(shape(B, C))
            print(json.dumps(R[-1]), flush=True)
    S = {}
    for n in ("dev", "host", "batched"):
        for C in (1024, 2048):
            p = [(r["batch"], r[n]) for r in R if r["context"] == C]
            b = sum(a for a, _ in p) / 4
            t = sum(c for _, c in p) / 4
            S[n + "@" + str(C)] = (sum((a - b) * (c - t) for a, c in p)
                                   / sum((a - b) ** 2 for a, _ in p))
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "per_seq_s": S}))


if __name__ == "__main__":
    main()
