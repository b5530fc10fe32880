"""`tlt paper`: the published tables as measurements, the fitted profiles, the reproduction."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.calibrate.published.microbenchmarks import load_published
from workbench.cli import app
from workbench.paper.reproduce import progress_messages
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError
from workbench.paper import report
from workbench.paper.profiles import CASES, refit

runner = CliRunner()


@pytest.fixture(scope="module")
def fitted():
    return refit()


def test_the_published_tables_load_as_measurements():
    pub = load_published()
    tables = {m.table for m in pub.measurements}
    assert tables == {"C", "D", "depth_tv", "E"}
    assert len([m for m in pub.measurements if m.table == "C"]) == 24
    assert len(pub.table_a) == 8 and pub.table_g["rl_adapted"] == 6.53
    assert pub.table_e_strategy.name == "8_4_48"  # quoted in the YAML: unquoted, YAML reads 8448


def test_a_malformed_tables_file_names_itself(tmp_path):
    bad = tmp_path / "tables.yaml"
    bad.write_text("table_c: {model: x}\n")
    with pytest.raises(ConfigError) as exc:
        load_published(bad)
    assert str(bad) in str(exc.value)


def test_the_fit_reproduces_the_microbenchmarks_and_the_presets_are_its_output(fitted):
    fit, profiles = fitted
    assert fit.median_abs_error_pct < 5.0
    assert [p.name for p in profiles] == [c.profile for c in CASES]
    # The shipped presets are what the fit writes, within the refit tolerance a CPU change moves a
    # fit by (regenerate with `tlt paper --write-profiles`).
    assert report.stale_presets(profiles) == []
    for p in profiles:
        assert load_profile(p.name).fitted_on and "tlt paper" in p.source


def test_a_refit_writes_the_shipped_presets_unless_it_moved_beyond_the_tolerance(fitted):
    _, profiles = fitted
    first = profiles[0]
    nudged = replace(
        first,
        drafter=replace(first.drafter, eagle_s_per_seq=first.drafter.eagle_s_per_seq * 1.0001),
    )
    moved = replace(
        first, drafter=replace(first.drafter, eagle_s_per_seq=first.drafter.eagle_s_per_seq * 1.01)
    )
    assert report.stale_presets([nudged]) == [] and report.stale_presets([moved]) == [first.name]
    # Within the tolerance the shipped file is written back unchanged, so every machine writes the
    # same bytes.
    assert report.profiles_to_write([nudged]) == [load_profile(first.name)]
    assert report.profiles_to_write([moved]) == [moved]


def test_shape_scaling_is_consistent(fitted):
    _, profiles = fitted
    by = {p.name: p for p in profiles}
    tp1, tp4 = by["h100-qwen2.5-7b-tp1"].decode, by["h100-qwen2.5-7b-tp4"].decode
    # Tensor parallelism splits the weights and the compute, and adds all-reduces to the fixed cost.
    assert tp4.weights_s == pytest.approx(tp1.weights_s / 4, rel=1e-3)
    assert tp4.compute_s_per_token == pytest.approx(tp1.compute_s_per_token / 4, rel=1e-3)
    assert tp4.overhead_s > tp1.overhead_s
    # The same architecture, the same costs.
    assert by["h100-r1-distill-qwen-7b-tp4"].decode == tp4
    # Bigger models read more per GPU at the same TP.
    assert (
        by["h100-llama3.3-70b-tp8"].decode.weights_s > by["h100-qwen2.5-32b-tp8"].decode.weights_s
    )


def test_tlt_paper_prints_and_writes_the_same_rows(tmp_path):
    res = runner.invoke(app, ["paper", "--out", str(tmp_path), "--steps", "2", "--no-calibrate"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "paper.json").read_text())
    rows = doc["rows"]
    assert {r["table"] for r in rows} == {"A", "C", "E", "G"}
    # Table A: each case predicted with the measured-database profile, and checked with the
    # paper-fitted one.
    a_rows = [r for r in rows if r["table"] == "A"]
    assert len(a_rows) == 16 and len([r for r in rows if r["table"] == "C"]) == 24
    assert sum(r["basis"] == "predicted" for r in a_rows) == 8
    assert sum("paper-fitted" in r["basis"] for r in a_rows) == 8
    assert all("-sglang]" in r["case"] for r in a_rows if r["basis"] == "predicted")
    for r in rows:
        assert r["basis"] in ("fit", "predicted", "check: paper-fitted")
        assert r["error_pct"] == pytest.approx(100 * (r["predicted"] / r["published"] - 1))
        assert f"{r['published']:,.2f}" in res.stdout and f"{r['predicted']:,.2f}" in res.stdout
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(last) >= {"median_abs_error_pct", "max_abs_error_pct", "rows"} and last[
        "rows"
    ] == len(rows)
    assert last == doc["summary"]
    assert {e["case"] for e in doc["explanations"]} == {
        "qwen2.5-7b",
        "r1-distill-qwen-7b",
        "qwen2.5-32b",
        "llama3.3-70b",
    }
    # Progress is real: one line per simulation, as many as the page's bar counts.
    assert res.output.count("seed 0 (") == progress_messages(1)


def test_the_paper_page_fits_on_arrival_and_colours_the_gap():
    from streamlit.testing.v1 import AppTest

    def page():
        from workbench.ui import paper_page

        paper_page.render()

    at = AppTest.from_function(page, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    assert any("fit" in c.value.lower() for c in at.caption)
    at.number_input(key="paper_steps").set_value(1)
    at.button(key="paper_run").click().run()
    assert not at.exception, at.exception
    # The headline is Table A's prediction error, not the microbenchmark fit; without calibration
    # the pre-registered one and the one on measured lengths exist: no tile reads "-", no column
    # holds nothing.
    assert [m.label for m in at.metric] == ["Table A prediction, pre-registered: median |gap|",
                                            "Table A prediction, measured lengths: median |gap|"]
    assert all(m.value.endswith("%") for m in at.metric), [m.value for m in at.metric]
    table = at.dataframe[0].value
    assert len(table) == 44 and set(table["basis"]) == {"fit", "predicted", "check: paper-fitted"}
    assert {"published", "unit", "pre-registered", "gap %", "measured lengths",
            "measured lengths gap %"} <= set(table.columns)
    assert not {"measured parts", "calibrated (LOO)", "measured gap %", "calibrated gap %"} & set(
        table.columns)
    assert not [c for c in table.columns if table[c].isna().all()]
    assert any("tick **Calibrate**" in c.value for c in at.caption)
    # Where Table A's time goes: every number with its unit (seconds, shares, x), no raw float.
    why = at.dataframe[1]
    config = json.loads(why.proto.columns)
    numeric = [c for c in why.value.columns if why.value[c].dtype.kind == "f"]
    assert numeric and all(config[c]["type_config"].get("format") for c in numeric), config
    assert config["baseline step"]["type_config"]["format"] == "%.1f s"
    assert config["rollout share"]["type_config"]["format"] == "percent"
    assert config["TLT rollout speedup"]["type_config"]["format"] == "%.2fx"


def test_a_figure_missing_in_a_calibrated_run_reads_a_dash():
    """With calibration some rows lack a measured-parts figure: '-', not "None" or "nan"."""
    from dataclasses import replace

    from workbench.calibrate.published.microbenchmarks import load_published
    from workbench.paper.profiles import refit
    from workbench.paper.reproduce import reproduce
    from workbench.ui.paper_page import paper_table

    rep = reproduce(refit()[0], load_published(), steps=1, seeds=[0])
    rows = [replace(r, measured_parts=r.published if i % 2 else None, calibrated=None)
            for i, r in enumerate(rep.rows)]
    styled = paper_table(replace(rep, rows=rows, split="declared"))
    assert "measured parts" in styled.data.columns and "calibrated (LOO)" not in styled.data.columns
    text = styled.to_string(delimiter="|")
    assert "None" not in text and "nan" not in text
    cells = [line.split("|") for line in text.splitlines()]
    col = cells[0].index("measured parts")
    assert {row[col] for row in cells[1::2]} == {"-"}  # rows 0, 2, ...: the figure missing


def test_tlt_paper_peers_sets_each_claim_beside_its_prediction(tmp_path):
    res = runner.invoke(app, ["paper", "--peers", "--out", str(tmp_path), "--steps", "2"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "peers.json").read_text())
    peers = [r["case"].split(":")[0] for r in doc["rows"]]
    assert peers == ["RollPacker", "APRIL", "veRL fully async", "SPEC-RL"]
    for r in doc["rows"]:
        assert (
            r["predicted"] > 0
            and r["basis"] == "predicted"
            and f"{r['predicted']:,.2f}" in res.stdout
        )
    # SPEC-RL's drafts come from earlier epochs: its steps are counted after the first pass.
    spec = next(e for e in doc["explanations"] if e["peer"] == "SPEC-RL")
    assert spec["steps_counted"].startswith("32-") and spec["accept_len"] > 1.0
    assert json.loads(res.stdout.strip().splitlines()[-1]) == doc["summary"]


# --- the calibration split (traces/published/calibration-split.yaml) ------------------------------

def _tiny_split(tmp_path):
    """The declared split's parameters with two grid points each (within their ranges), for a 1-step
    grid."""
    import yaml

    from workbench.paper.calibration import load_split
    d = yaml.safe_load(Path(load_split().path).read_text())
    for p in d["parameters"]:
        p["grid"] = (
            [p["range"][0], p["range"][1]] if p["name"] != "train_efficiency" else [p["range"][1]]
        )
    path = tmp_path / "split.yaml"
    path.write_text(yaml.safe_dump(d))
    return load_split(path)


def test_the_declared_split_loads_with_at_most_three_global_parameters_inside_their_ranges():
    from workbench.paper.calibration import PARAMETERS, load_split
    split = load_split()
    assert 1 <= len(split.parameters) <= 3 and {p.name for p in split.parameters} <= set(PARAMETERS)
    for p in split.parameters:
        assert all(p.low <= v <= p.high for v in p.grid)
    assert set(split.models) == {"qwen2.5-7b", "r1-distill-qwen-7b", "qwen2.5-32b", "llama3.3-70b"}


def test_a_grid_value_outside_its_declared_range_is_refused(tmp_path):
    import yaml

    from workbench.paper.calibration import load_split
    d = yaml.safe_load(Path(load_split().path).read_text())
    d["parameters"][0]["grid"] = [99.0]
    bad = tmp_path / "split.yaml"
    bad.write_text(yaml.safe_dump(d))
    with pytest.raises(ConfigError) as exc:
        load_split(bad)
    assert str(bad) in str(exc.value) and "grid" in str(exc.value)


@pytest.fixture(scope="module")
def tiny_grid(tmp_path_factory):
    """The real code path (measured parts + parameters -> simulated Table A speedups), at 1 RL
    step."""
    from workbench.paper.calibration import evaluate_grid
    from workbench.paper.reproduce import WORKLOADS, run_case
    split = _tiny_split(tmp_path_factory.mktemp("split"))
    return split, evaluate_grid(
        split, list(WORKLOADS), lambda m, p: run_case(m, p, 1, [0]).speedups
    )


def test_leave_one_out_never_sees_the_held_out_figures(tiny_grid):
    from workbench.paper.calibration import leave_one_out
    from workbench.paper.reproduce import WORKLOADS, published_a
    split, grid = tiny_grid
    published = published_a(load_published())
    models = list(WORKLOADS)
    rounds = leave_one_out(grid, published, models)
    assert [r.held_out for r in rounds] == models
    for r in rounds:
        assert r.held_out not in r.fit_models
        # Perturb the held-out model's published figures wildly, both ways: its round's parameters
        # do not move.
        for factor in (0.3, 3.0):
            moved = {k: (v * factor if k[0] == r.held_out else v) for k, v in published.items()}
            again = next(x for x in leave_one_out(grid, moved, models) if x.held_out == r.held_out)
            assert again.params == r.params
            assert again.fit_loss == pytest.approx(r.fit_loss, rel=1e-12)
        for p in split.parameters:
            assert p.low <= r.params[p.name] <= p.high


def test_a_fit_model_s_figures_do_move_the_fit(tiny_grid):
    """The objective is not inert: moving the fit models' published figures to another grid point's
    simulated values makes that point the choice."""
    from workbench.paper.calibration import best_point
    from workbench.paper.reproduce import WORKLOADS
    _, grid = tiny_grid
    models = list(WORKLOADS)
    for target in grid:
        chosen = best_point(grid, dict(target.speedups), models[1:])
        assert chosen.speedups == pytest.approx(target.speedups) or chosen.params == target.params


def test_tlt_paper_writes_what_it_prints(tmp_path, tiny_grid):
    split, _ = tiny_grid
    result = runner.invoke(
        app,
        [
            "paper",
            "--out",
            str(tmp_path),
            "--steps",
            "1",
            "--calib-steps",
            "1",
            "--split",
            split.path,
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "paper.json").read_text())
    assert doc["schema"] == "tlt-paper/2" and doc["split"] and len(doc["rounds"]) == 4
    printed = json.loads(result.output.strip().splitlines()[-1])
    assert printed == doc["summary"]
    a = [r for r in doc["rows"] if r["table"] == "A" and r["basis"] == "predicted"]
    assert len(a) == 8 and all(
        r["measured_parts"] is not None and r["calibrated"] is not None for r in a
    )
    for r in a:  # every Table A row's three values are on the printed line
        line = next(x for x in result.output.splitlines() if r["case"] in x)
        assert all(
            f"{r[k]:,.2f}" in line for k in ("pre_registered", "measured_parts", "calibrated")
        )
