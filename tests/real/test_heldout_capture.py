"""The CPU loop's held-out check, small: fresh fit captures on vLLM, a profile fitted on them, and
an EAGLE capture under conditions the fit never saw (another prompt mix, group size, batch cap,
draft schedule and seed) re-simulated by `tlt validate`'s machinery.

The simulated engine steps and accepted length depend on tokens and scheduling only, not on how
fast this machine is, so they are held tight; the rollout time, after the drift correction the
captures' speed probes give, only to its order (a shared machine's speed moves more than any
accuracy bound)."""

from __future__ import annotations

import pytest

from workbench.calibrate.captures.report import calibrate
from workbench.validate.capture_plan import CaptureSpec, VllmMachine
from workbench.contracts.profile import load_profile
from workbench.validate.capture import validate

pytestmark = [pytest.mark.needs_vllm, pytest.mark.needs_reference]

SCHEDULE = ((1, 4, 6), (5, 16, 2))
FIT = [  # name, kind, prompts, samples, max_tokens, batch cap, seed, schedule
    ("fit-none-a", "none", 8, 2, 384, 8, 1, ()),
    ("fit-none-b", "none", 8, 4, 384, 16, 2, ()),
    ("fit-eagle-a", "eagle", 8, 2, 384, 8, 3, SCHEDULE),
    ("fit-eagle-b", "eagle", 8, 4, 384, 16, 4, ((1, 8, 3), (9, 16, 4))),
]
HELDOUT = CaptureSpec(
    "heldout-eagle", "eagle", "heldout", 0, 8, 3, 384, 12, 77, "hard", ((1, 3, 4), (4, 12, 2))
)


@pytest.fixture(scope="module")
def captured(reference_model, reference_drafter):
    machine = VllmMachine(reference_model, reference_drafter, seed=0)
    specs = [
        CaptureSpec(n, k, "fit", 0, p, s, t, c, seed, "default", sched)
        for n, k, p, s, t, c, seed, sched in FIT
    ]
    traces = {}
    try:
        for spec in [*specs[:2], *specs[2:], HELDOUT]:
            if machine.session.kind != spec.kind:
                machine.start(spec.kind)
            traces[spec.name] = machine.capture(spec)
    finally:
        machine.close()
    return traces


def test_a_held_out_eagle_capture_is_paced_as_measured_and_timed_to_its_order(captured):
    fit = [captured[n] for n, *_ in FIT]
    profile = calibrate(fit, load_profile("cpu-tiny"), name="ci-heldout").profile
    assert profile.speed_probe_ms is not None, (
        "the captures timed the machine; the profile records its speed"
    )
    v = validate(profile, captured["heldout-eagle"])
    d = v.details
    assert v.drift_factor is not None and v.raw_measured_rollout_s is not None
    # Pacing: engine steps within 5% (the goal is 3%; this capture's tail is a few steps of one
    # response: 161 of 161 in three runs here) and the accepted length within 10% (-6% here).
    assert d.engine_steps_simulated == pytest.approx(d.engine_steps_traced, rel=0.05), d
    assert d.accept_len_simulated == pytest.approx(d.accept_len_traced, rel=0.10), d
    # Time: only its order is held. A 1.5 s capture moves with whatever shares the machine: -17% to
    # +1% after the drift correction beside four busy processes, +38% and +88% beside a second test
    # suite; a unit or drift-correction bug moves it far more than 3x. How well the time is
    # predicted is measured (docs/results.md, the CPU loop), not asserted.
    assert 1 / 3 < 1 + v.error_pct / 100 < 3, (v.error_pct, v.raw_error_pct, v.drift_factor)
