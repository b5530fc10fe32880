"""The app's run totals: a whole run's days, GPU-hours, cost and energy beside the per-step
figures."""

from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from workbench.contracts.energy import GpuPower, GpuSeconds  # noqa: E402
from workbench.ui.run_totals import MeanStep, totals_frame  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "app.py"


def test_totals_are_the_mean_step_times_the_run():
    steps = [
        MeanStep("baseline", 600.0, GpuSeconds(3000.0, 1500.0, 300.0)),
        MeanStep("tlt", 300.0, None),
    ]
    df = totals_frame(steps, gpus=8, run_steps=1000, price=2.0, power=GpuPower(500.0, 100.0, 600.0))
    assert df.loc["baseline", "days"] == pytest.approx(600.0 * 1000 / 86400)
    assert df.loc["baseline", "gpu_hours"] == pytest.approx(4800.0 * 1000 / 3600)
    assert df.loc["baseline", "cost"] == pytest.approx(2.0 * df.loc["baseline", "gpu_hours"])
    assert df.loc["baseline", "energy_kwh"] == pytest.approx(
        (3000 * 500 + 1500 * 100 + 300 * 600) * 1000 / 3.6e6
    )
    # Without the per-state split: GPU-hours from wall time x GPUs, energy unknown.
    assert df.loc["tlt", "gpu_hours"] == pytest.approx(300.0 * 8 * 1000 / 3600)
    assert pd.isna(df.loc["tlt", "energy_kwh"])
    assert df.loc["tlt", "saving"] == pytest.approx(0.5)


def _totals(at):
    return next(d.value for d in at.dataframe if "Days" in d.value.columns)


def test_whatif_shows_run_totals_with_a_price_and_its_currency():
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.selectbox(key="whatif_wl_preset").set_value("cpu-tiny")
    at.number_input(key="whatif_steps_n").set_value(2)
    at.button(key="whatif_run").click().run()
    totals = _totals(at)
    assert (totals["Cost (USD)"] == "-").all()  # no price yet: '-' and a hint, never 'None'
    assert any("give a price per GPU-hour" in c.value for c in at.caption)
    at.number_input(key="whatif_totals_run_steps").set_value(500)
    at.number_input(key="whatif_totals_price").set_value(3.0)
    at.text_input(key="whatif_totals_currency").set_value("EUR")
    at.text_input(key="whatif_totals_watts").set_value("300,60,350").run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    totals = _totals(at)
    assert "Cost (EUR)" in totals.columns and "Run time saved vs baseline" in totals.columns
    res = at.session_state["whatif_result"]
    for name, run in zip(res.labels, res.runs):
        days = run.mean("step_time_s") * 500 / 86400
        assert totals.loc[name, "Days"] == f"{days:,.2f}"
        assert float(totals.loc[name, "Cost (EUR)"].replace(",", "")) > 0
        assert float(totals.loc[name, "Energy (kWh)"].replace(",", "")) > 0


def test_compare_shows_run_totals_with_energy():
    def page():
        from workbench.ui.compare_page import render

        render()

    at = AppTest.from_function(page, default_timeout=60)
    at.run()
    at.selectbox(key="compare_wl").set_value("fastrl-example-7b-8gpu")
    at.multiselect(key="compare_policies").set_value(["baseline", "tlt"])
    at.number_input(key="compare_seeds").set_value(2)
    at.number_input(key="compare_steps").set_value(1)
    at.button(key="compare_run").click().run()
    at.number_input(key="compare_totals_price").set_value(2.0).run()
    assert not at.exception, at.exception
    totals = _totals(at)
    assert list(totals.index) == ["baseline", "tlt"]
    assert not totals.isin(["None"]).any().any()
    # The profile's power model.
    assert all(float(v.replace(",", "")) > 0 for v in totals["Energy (kWh)"])
