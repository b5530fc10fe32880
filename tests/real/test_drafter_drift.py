"""A static drafter's acceptance falls as the policy changes; the spot-trained drafter's holds.

The real components without vLLM (real/drift.py): GRPO updates of the shipped reference model
(traces/reference/model) on `transformers` rollouts of the GCD task, the shipped EAGLE drafter
(traces/reference/drafter, trained on that initial policy) kept static (only following the new
target's embedding and LM head) or spot-trained on each new policy's responses, both measured
by `SpotTrainer.estimate_accept_len` on held-out responses of the policy of the moment.

Measured on this project's machine (2 busy x86 cores, torch CPU; `python -m pytest -s
tests/test_drafter_drift.py`), the accepted length (k = 4) at the start -> static / spot after
5 updates at lr 1e-3:

    seed 0: 3.270 -> 2.684 / 3.188
    seed 1: 3.199 -> 2.824 / 3.410
    seed 2: 3.293 -> 2.508 / 3.238

At this learning rate the policy drifts by degrading: the rollouts' mean reward falls from
0.34-0.47 to about 0 within the 5 updates (real/drift.py has gentler rates). The margins below
are about half the smallest measured drop (0.375) and gap (0.504).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

HAVE_TORCH = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "safetensors"))
REFERENCE = Path(__file__).resolve().parents[2] / "traces" / "reference"
MODEL, DRAFTER = REFERENCE / "model", REFERENCE / "drafter"
HAVE_REFERENCE = (MODEL / "model.safetensors").is_file() and (DRAFTER / "model.safetensors").is_file()

pytestmark = [
    pytest.mark.skipif(not HAVE_TORCH, reason="torch/transformers/safetensors are not installed (the 'cpu' extra)"),
    pytest.mark.skipif(not HAVE_REFERENCE, reason=f"the shipped reference model and drafter ({REFERENCE}) are absent"),
]

UPDATES = 5
LR = 1e-3
DROP = 0.2  # the static drafter's accepted length falls by at least this much
GAP = 0.2  # the spot drafter's final accepted length beats the static one's by at least this much


def test_static_drafter_falls_while_spot_drafter_holds():
    from real.drift import drift_experiment

    t0 = time.perf_counter()
    out = drift_experiment(MODEL, DRAFTER, updates=UPDATES, prompts=8, samples=4, max_tokens=200, lr=LR,
                           spot_steps=40, seed=0, log=print, measure_every=UPDATES)
    start, static, spot = out["initial_accept_len"], out["static_accept_len"], out["spot_accept_len"]
    print(f"accepted length: start {start:.3f}; after {UPDATES} updates static {static:.3f}, spot {spot:.3f} "
          f"(ratio {out['ratio']:.3f}); {time.perf_counter() - t0:.1f}s")

    assert [r["update"] for r in out["updates"]] == list(range(UPDATES + 1))
    assert out["updates"][0]["spot_accept_len"] == start  # both start as the shipped drafter
    assert all(r["static_accept_len"] is None for r in out["updates"][1:-1])  # measured at the start and end only
    assert static < start - DROP, f"the static drafter did not fall: {start:.3f} -> {static:.3f}"
    assert spot > static + GAP, f"the spot drafter does not beat the static one: {spot:.3f} vs {static:.3f}"
    assert out["ratio"] == pytest.approx(spot / static)
