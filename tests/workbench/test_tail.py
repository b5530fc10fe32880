"""The tail checked (issue 51): the evidence items' declared set-ups, the Search-R1 trace's steps
drained, Table A's rows naming their measured lengths, and how far a speedup moves with the tail's
shape."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from sim.lengths import log_median
from workbench.cli import app
from workbench.paper.tail_sensitivity import tail_sensitivity, variants
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.workload import load_workload
from workbench.paper.measured_lengths import load_declaration
from workbench.paper.reproduce import WORKLOADS
from workbench.validate import tail_evidence, tail_trace
from workbench.validate.agentic_trace import makespans, measured_steps

runner = CliRunner()


def test_every_evidence_item_is_simulated_or_says_why():
    items = tail_evidence.load_evidence()
    assert len(items) == 6  # ../shared/data/tail-evidence/README.md's six
    for it in items:
        if it.simulated:
            assert it.cases and it.curve and it.unknowns and it.setup
            assert it.workload is not None and it.policy is not None
        else:
            assert len(it.reason) > 80 and not it.cases


def test_an_evidence_item_is_simulated_in_its_own_set_up():
    """The slime rollout: 56 responses on 2 TP4 engines carried to the H20, SD on at every batch,
    a quarter of the responses run to the cap (the log's truncated ratio)."""
    it = next(i for i in tail_evidence.load_evidence() if i.id == "slime-qwen3.6-27b")
    assert it.profile.cluster.gpu == "h20" and it.workload.gpus_per_worker == 4
    res = tail_evidence.check_case(it, it.cases[0], seeds=(0,))
    d = res.drains[0]
    assert d.responses == 56 and d.workers == 2
    assert res.accept_len > 1.5  # SD ran
    assert 0.0 <= res.gap <= 1.0 and len(res.shares) == len(it.shares)
    at_cap = (d.finish_s == d.finish_s.max()).mean()
    assert 0.1 < at_cap < 0.45  # the capped responses finish together, last


def test_the_search_r1_trace_step_drains_as_measured():
    """Step 0 measured: its slowest trajectory is the step's makespan `tlt workload check` reads;
    the replay's curve is within the issue's 10 points of it (1.6 with the shipped engine), on its
    own rollout's time and on the measured one's."""
    wl = load_workload("polytrace-search-r1-qwen2.5-7b")
    (s,) = tail_trace.check(wl, load_profile(wl.profile), [0])
    meas = measured_steps(wl)
    assert s.trajectories == 2048
    assert s.measured_s == pytest.approx(makespans(meas[meas["batch"] == 0], "engine_s")[0])
    assert s.gap < 0.10 and s.clock_gap < 0.10
    assert sum(s.measured_shares) == pytest.approx(1.0)
    assert sum(s.simulated_shares) == pytest.approx(1.0)


def test_table_a_rows_name_their_length_source():
    """Each Table A model declares its measured lengths (or why it has none); a declared workload
    replays measured lengths, says where they come from, and keeps the pre-registered row's
    cluster and batch."""
    rows = {r.model: r for r in load_declaration()}
    assert set(rows) == set(WORKLOADS)
    assert rows["qwen2.5-32b"].workload is not None
    assert "polytrace-dapo-qwen2.5-32b" in rows["qwen2.5-32b"].lengths
    for model, r in rows.items():
        assert r.why and r.lengths
        if r.workload is None:
            assert r.lengths == "none"
            continue
        wl, pre = load_workload(r.workload), load_workload(WORKLOADS[model])
        assert wl.lengths.kind == "replay"
        assert "github.com/Zhou-jiecheng/PolyTrace" in wl.source and "4246156f" in wl.source
        for field in ("profile", "workers", "gpus_per_worker", "prompts_per_step", "group_size",
                      "max_batch", "model", "gpu", "framework"):
            assert getattr(wl, field) == getattr(pre, field), (model, field)
        assert not wl.dynamic_sampling.enabled


def test_the_tail_range_keeps_the_body_and_moves_the_tail():
    wl = replace(load_workload("cpu-tiny"), steps=1)
    vs = variants(wl)
    assert [label for label, _ in vs][0] == "as given"
    cap = wl.max_response_tokens
    medians = {round(log_median(m, cap), 9) for _, m in vs}
    assert len(medians) == 1  # the median correct answer is the workload's in every variant
    labels = {label for label, _ in vs}
    assert {"sigma 0.6", "sigma 1.3", "wrong_factor 6"} <= labels
    pols = [load_policy("baseline"), load_policy("tlt")]
    ts = tail_sensitivity(wl, pols, load_profile(wl.profile), [0], 1)
    lo, hi = ts.span("tlt")
    assert lo <= ts.points[0].speedup["tlt"] <= hi and lo < hi
    clip = {p.label: p.clip_ratio for p in ts.points}
    assert clip["sigma 1.3"] > clip["as given"] > clip["sigma 0.6"]


def test_measured_lengths_have_no_assumed_tail_to_vary():
    wl = load_workload("polytrace-dapo-qwen2.5-32b")
    with pytest.raises(ValueError, match="measured, not assumed"):
        tail_sensitivity(wl, [load_policy("baseline"), load_policy("tlt")],
                         load_profile(wl.profile), [0], 1)


def test_compare_prints_the_speedups_over_the_tail_range(tmp_path):
    res = runner.invoke(app, ["compare", "--workload", "cpu-tiny", "--policies", "baseline,tlt",
                              "--seeds", "1", "--steps", "1", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "How much of each speedup rests on the tail's shape" in res.stdout
    doc = json.loads((tmp_path / "tail_sensitivity.json").read_text())
    assert doc["reference_policy"] == "baseline" and len(doc["points"]) >= 4
    assert all(math.isfinite(p["speedup"]["tlt"]) for p in doc["points"])


def test_what_if_varies_an_assumed_tail_and_says_measured_lengths_have_none():
    from streamlit.testing.v1 import AppTest

    def page(name: str = "cpu-tiny"):
        from dataclasses import replace

        from workbench.contracts.policy import load_policy
        from workbench.contracts.profile import load_profile
        from workbench.contracts.workload import load_workload
        from workbench.ui import tail_panel

        wl = replace(load_workload(name), steps=1)
        tail_panel.render(wl, load_profile(wl.profile),
                          [load_policy("baseline"), load_policy("tlt")], 0)

    at = AppTest.from_function(page, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    at.button(key="whatif_tail_run").click().run()
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert table["length model"].iloc[0] == "as given" and len(table) >= 4
    assert table["tlt"].str.endswith("x").all()
    assert any(c.value.startswith("Over the range: tlt ") for c in at.caption)

    measured = AppTest.from_function(page, args=("polytrace-dapo-qwen2.5-32b",),
                                     default_timeout=60)
    measured.run()
    assert not measured.exception, measured.exception
    assert any("measured, not assumed" in c.value for c in measured.caption)
    assert not measured.button
