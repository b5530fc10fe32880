"""One training forward at the measured database's costs: seconds for a micro-batch of b sequences
of L tokens each, on one GPU of the training (its tensor-parallel rank), for the model that runs it.

The database (aiconfigurator-core, workbench/calibrate/database/aiconfigurator.py) prices the
context op list of (b, L): the GEMMs at that many tokens (small micro-batches run them below
peak, as measured), causal attention over each sequence, the norms and activations; the LM head
over every token for a policy (a critic's value head is one number a token: left out). A grid of
(b, L) is asked once per model, GPU, TP and package version and kept on disk beside the derived
profiles; between its points the seconds are interpolated in log-log.

Beyond the kernels, a policy reads and writes its logits in fp32 over the whole vocabulary, at the
GPU's memory bandwidth (the database's system spec): `logits_s`, counted from veRL's actor code,
per vocabulary entry and token: a log-prob pass casts the logits to fp32 (2 bytes read, 4
written), divides them by the temperature in place (4 and 4), takes their log-softmax (4 and 4)
and gathers: LOGIT_BYTES_FORWARD; an update also takes their entropy (softmax 4 and 4, logsumexp
4, the sum of p x logits 8) and runs all of it backward (about twice its forward's traffic):
LOGIT_BYTES_UPDATE.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.contracts import fileio
from workbench.contracts.architecture import load_architecture

BATCHES = tuple(2 ** k for k in range(0, 11))  # 1-1024 sequences per micro-batch
LENGTHS = tuple(2 ** k for k in range(5, 16))  # 32-32768 tokens per sequence
MAX_TOKENS = 1 << 21  # grid points past this many tokens are extrapolated (linear in b)
LOGIT_BYTES_FORWARD = 24
LOGIT_BYTES_UPDATE = 96
GRID_VERSION = 1


@dataclass(frozen=True)
class ForwardGrid:
    """Seconds of one forward (module docstring) at BATCHES x LENGTHS (NaN: not asked)."""

    model: str
    gpu: str
    tp: int
    value_head: bool
    seconds: tuple[tuple[float, ...], ...]  # [batch][length]
    memory_bytes_per_s: float  # the GPU's, for the logits' traffic
    vocab: int

    def forward_s(self, b: np.ndarray | float, length: np.ndarray | float) -> np.ndarray:
        """One forward's kernels over micro-batches of `b` sequences of `length` tokens (arrays
        broadcast)."""
        b = np.maximum(np.asarray(b, float), 1.0)
        length = np.clip(np.asarray(length, float), LENGTHS[0], LENGTHS[-1])
        lb, ll = np.log2(np.minimum(b, BATCHES[-1])), np.log2(length) - np.log2(LENGTHS[0])
        grid = np.log(np.array(self.seconds, float))
        i0 = np.clip(np.floor(lb).astype(int), 0, len(BATCHES) - 2)
        j0 = np.clip(np.floor(ll).astype(int), 0, len(LENGTHS) - 2)
        fi, fj = lb - i0, ll - j0
        out = np.zeros(np.broadcast(lb, ll).shape)
        for di, wi in ((0, 1 - fi), (1, fi)):
            for dj, wj in ((0, 1 - fj), (1, fj)):
                out = out + wi * wj * _filled(grid, i0 + di, j0 + dj)
        return np.exp(out) * np.maximum(1.0, b / BATCHES[-1])

    def logits_s(self, tokens: np.ndarray | float, update: bool) -> np.ndarray:
        """The logits' memory traffic over `tokens` tokens (module docstring; a value head's:
        none)."""
        if self.value_head:
            return np.zeros_like(np.asarray(tokens, float))
        per = LOGIT_BYTES_UPDATE if update else LOGIT_BYTES_FORWARD
        return np.asarray(tokens, float) * self.vocab * per / self.memory_bytes_per_s


def _filled(grid: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """grid[i, j], where not asked (too many tokens) the largest batch asked at that length
    scaled linearly in the batch."""
    v = grid[i, j]
    missing = np.isnan(v)
    if np.any(missing):
        jj = np.broadcast_to(j, v.shape)[missing]
        ii = np.broadcast_to(i, v.shape)[missing]
        top = np.array([np.max(np.flatnonzero(~np.isnan(grid[:, x]))) for x in jj])
        v = v.copy()
        v[missing] = grid[top, jj] + (ii - top) * np.log(2.0)
    return v


def _ask(arch: str, gpu: str, tp: int, framework: str) -> tuple[ForwardGrid, ForwardGrid]:
    """The grid with the LM head and with a value head, from one build of the database's engine."""
    from workbench.calibrate.database.aiconfigurator import Engine

    eng = Engine(arch, gpu, tp, framework)
    model = eng.model if tp > 1 else eng.full
    spec = eng.db.system_spec["gpu"]
    bw = float(spec["mem_bw"]) * float(spec.get("mem_bw_empirical_scaling_factor", 1.0))
    vocab = load_architecture(arch).vocab
    out = []
    for value_head in (False, True):
        rows = tuple(tuple(float("nan") if b * n > MAX_TOKENS else
                           eng.micro_batch_forward(model, b, n, not value_head)[0]
                           for n in LENGTHS) for b in BATCHES)
        out.append(ForwardGrid(arch, gpu, tp, value_head, rows, bw, vocab))
    return out[0], out[1]


def _path(arch: str, gpu: str, tp: int, framework: str, value_head: bool) -> Path:
    from workbench.calibrate.database.aiconfigurator import package_version

    src = Path(arch)
    tag = hashlib.sha256(src.read_bytes()).hexdigest()[:8] if src.is_file() else arch
    key = (f"{Path(arch).stem}-{tag}-{gpu}-tp{tp}-{framework}-{'value' if value_head else 'lm'}"
           f"-aic{package_version()}-g{GRID_VERSION}")
    return fileio.cache_dir("forward") / f"{key}.json"


def _load(path: Path) -> ForwardGrid | None:
    if not path.is_file():
        return None
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
        return ForwardGrid(d["model"], d["gpu"], d["tp"], d["value_head"],
                           tuple(tuple(float("nan") if x is None else x for x in r)
                                 for r in d["seconds"]), d["memory_bytes_per_s"], d["vocab"])
    except (ValueError, KeyError, TypeError):
        return None  # a damaged cache file is asked again and replaced


def forward_grid(arch: str, gpu: str, tp: int, framework: str, value_head: bool) -> ForwardGrid:
    """The grid (module docstring), asked once and kept in $XDG_CACHE_HOME/tlt/forward/."""
    path = _path(arch, gpu, tp, framework, value_head)
    grid = _load(path)
    if grid is not None:
        return grid
    for g in _ask(arch, gpu, tp, framework):
        p = _path(arch, gpu, tp, framework, g.value_head)
        p.parent.mkdir(parents=True, exist_ok=True)
        fileio.write_json(p, {"model": g.model, "gpu": g.gpu, "tp": g.tp,
                              "value_head": g.value_head, "seconds": g.seconds,
                              "memory_bytes_per_s": g.memory_bytes_per_s, "vocab": g.vocab})
        if g.value_head == value_head:
            grid = g
    return grid
