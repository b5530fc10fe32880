"""`tlt workload import`: each file format, the report, the fit, and bad files refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.lengths import sample_step
from workbench.cli import app
from workbench.contracts.cluster_check import check_workload_profile
from workbench.contracts.length_data import COLUMNS, from_frame, read_observed
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.workload import LengthModel, load_workload
from workbench.workloads.build import Placement, import_workload, infer_cap
from workbench.workloads.mixture import fit_mixture
from workbench.workloads.reader import read_files

runner = CliRunner()
BASE = load_workload("cpu-tiny")


def polytrace_dir(tmp_path, steps=2):
    """PolyTrace packed_lengths: 2 dp ranks (global ranks 0 and 4) x 2 prompts x 4 samples, rank 4's
    lines first, and DAPO's filter record."""
    d = tmp_path / "poly"
    d.mkdir()
    for s in range(steps):
        lines = []
        for dp, rank in ((1, 4), (0, 0)):
            for local in range(2):
                out = [10 * (s + 1) + dp * 100 + local * 1000 + m for m in range(4)]
                lines.append(
                    {
                        "step": s,
                        "rank": rank,
                        "dp_rank": dp,
                        "tp_rank": 0,
                        "local_index": local,
                        "input": 50 + local,
                        "output": out,
                        "n_sampling": 4,
                        "validate": False,
                    }
                )
        lines.append({**lines[0], "validate": True})  # a validation line: skipped
        (d / f"packed_lengths_step_{s}.jsonl").write_text(
            "".join(json.dumps(x) + "\n" for x in lines)
        )
    filt = [
        {
            "workload_step": s,
            "trainer_step": s + 1,
            "gen_batch_index": 1,
            "prompt_count": 4,
            "n_sampling": 4,
            "train_batch_size": 2,
            "kept_prompt_indices": [1, 2],
        }
        for s in range(steps)
    ]
    (d / "dapo_filter_indices.jsonl").write_text("".join(json.dumps(x) + "\n" for x in filt))
    return d


def generic_frame():
    rows = []
    for step in range(2):
        for p, name in enumerate(("a", "b", "c")):
            for m in range(3):
                rows.append({"step": step, "prompt": f"{name}-{step}", "length": 20 + 7 * p + m,
                             "prompt_tokens": 30 + p,
                             "correct": bool(m == 0 and p != 2), "rank": p % 2})
    return pd.DataFrame(rows)


def test_polytrace_groups_ranks_prompt_lengths_and_dapo_flags(tmp_path):
    im = read_files([polytrace_dir(tmp_path)])
    obs = im.observed
    assert obs.responses == 32 and obs.batches == 2 and obs.groups == 8
    # Dp rank 0, local index 0 comes first in the batch though its line came later.
    g = obs.group_at(0)
    assert list(g.lengths) == [10, 11, 12, 13] and g.prompt_tokens == 50 and g.rank == 0
    assert [obs.group_at(i).mixed for i in range(4)] == [0, 1, 1, 0]  # kept_prompt_indices [1, 2]
    assert im.dapo.train_batch_size == 2 and any("validation" in n for n in im.notes)


@pytest.mark.parametrize("suffix", ["csv", "jsonl", "parquet"])
def test_generic_tables_in_each_format(tmp_path, suffix):
    df, path = generic_frame(), tmp_path / f"lengths.{suffix}"
    if suffix == "csv":
        df.to_csv(path, index=False)
    elif suffix == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in df.to_dict("records")))
    else:
        df.to_parquet(path)
    obs = read_files([path]).observed
    assert obs.responses == 18 and obs.batches == 2 and obs.groups == 6
    assert [obs.group_at(i).mixed for i in range(3)] == [1, 1, 0]  # mixed = rewards not all equal
    assert list(obs.group_at(1).lengths) == [27, 28, 29] and obs.group_at(1).prompt_tokens == 31


def test_summary_with_verl_metric_names_is_fitted(tmp_path):
    path = tmp_path / "metrics.csv"
    pd.DataFrame(
        {
            "step": [1, 2, 3],
            "response_length/mean": [500.0, 550.0, 600.0],
            "response_length/max": [8000.0, 8500.0, 9000.0],
            "response_length/min": [5.0, 6.0, 4.0],
            "response_length/clip_ratio": [0.0, 0.0, 0.001],
        }
    ).to_csv(path, index=False)
    res = import_workload([path], tmp_path / "w.yaml", BASE, cap=20480, responses_per_step=768)
    wl = load_workload(tmp_path / "w.yaml")
    assert wl.lengths.kind == "lognormal" and wl.lengths.drift_per_step > 0 and res.data is None
    assert 200 < wl.lengths.median_tokens < 600 and 0.5 < wl.lengths.sigma < 1.5


def test_import_writes_a_replay_workload_with_its_table(tmp_path):
    res = import_workload([polytrace_dir(tmp_path)], tmp_path / "w.yaml", BASE, cap=2048)
    wl = load_workload(tmp_path / "w.yaml")
    assert wl.lengths.kind == "replay" and wl.group_size == 4 and wl.max_response_tokens == 2048
    assert (
        wl.prompts_per_step == 2
        and wl.dynamic_sampling.enabled
        and wl.dynamic_sampling.oversample == 2.0
    )
    assert wl.prompt_tokens in (50, 51)
    assert (
        res.data == tmp_path / "w.lengths.parquet"
        and read_observed(wl.lengths.data).responses == 32
    )
    text = "\n".join(res.lines)
    for what in (
        "32 responses",
        "2 steps",
        "group size 4",
        "cap 2048",
        "rank 0: 16",
        "rank 4: 16",
        "p99",
        "KS",
    ):
        assert what in text


def test_cap_is_a_mass_at_the_longest_or_a_stated_guess():
    obs = from_frame(pd.DataFrame([(0, 0, 0, 1, x, -1, -1) for x in (5, 9, 700, 1024, 1024, 1024)],
                                  columns=list(COLUMNS)))
    assert infer_cap(obs, None)[0] == 1024
    one = from_frame(
        pd.DataFrame([(0, 0, 0, 1, x, -1, -1) for x in (5, 9, 700)], columns=list(COLUMNS))
    )
    cap, how = infer_cap(one, None)
    assert cap == 1024 and "--cap" in how
    with pytest.raises(ConfigError, match="longest"):
        infer_cap(one, 512)


def test_fit_recovers_a_known_model_and_reports_goodness():
    true = LengthModel(
        clip_ratio=0.0,
        median_tokens=400.0,
        sigma=0.6,
        mean_accuracy=0.85,
        wrong_factor=3.0,
        group_correlation=0.3,
    )
    rng = np.random.default_rng(0)
    rows = []
    for b in range(3):
        s = sample_step(true, 8192, 200, 8, b, rng)
        rows += [
            (b, int(p), -1, -1, int(x), int(c), -1)
            for p, x, c in zip(s.prompt, s.lengths, s.correct)
        ]
    obs = from_frame(pd.DataFrame(rows, columns=list(COLUMNS)))
    fit = fit_mixture(obs, 8192)
    assert fit.labelled and fit.ok
    assert fit.model.mean_accuracy == pytest.approx(0.85, abs=0.03)
    assert fit.model.wrong_factor == pytest.approx(3.0, rel=0.25)
    assert fit.model.group_correlation == pytest.approx(0.3, abs=0.12)
    assert {r.quantity for r in fit.rows} == {
        "p50",
        "p90",
        "p99",
        "max",
        "clip_ratio",
    } and 0 <= fit.ks < 0.05


def test_a_distribution_the_family_cannot_fit_says_so(tmp_path):
    # two far-apart spikes and a cap mass: no lognormal mixture of one log-sd matches p50, p90 and
    # p99
    x = np.concatenate([np.full(600, 30), np.full(300, 3000), np.full(100, 4096)])
    obs = from_frame(pd.DataFrame([(0, i // 4, -1, -1, int(v), -1, -1) for i, v in enumerate(x)],
                                  columns=list(COLUMNS)))
    fit = fit_mixture(obs, 4096)
    assert not fit.ok and "empirical" in fit.note


@pytest.mark.parametrize("content, where, field", [
    ('{"step": 0, "input": 5, "output": [3, -1]}\n', ":1", "output[1]"),
    ('{"step": 0, "input": 5, "output": [3]}\n{"step": 0, "input": 5\n', ":2", "<line>"),
    ('{"step": 0, "input": 5, "output": "long"}\n', ":1", "output"),
])
def test_bad_polytrace_lines_name_file_line_and_field(tmp_path, content, where, field):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(ConfigError) as exc:
        read_files([path])
    assert exc.value.source == f"{path}{where}" and exc.value.field == field


def test_bad_csv_names_the_line_and_nothing_is_written(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("step,prompt,length\n0,a,10\n0,a,ten\n")
    res = runner.invoke(
        app,
        ["workload", "import", str(path), "--out", str(tmp_path / "w.yaml"), "--base", "cpu-tiny"],
    )
    assert res.exit_code == 2
    assert f"{path}:3" in res.output and "length" in res.output
    assert not list(tmp_path.glob("w*"))


def test_unknown_columns_are_refused_with_what_is_accepted(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="step, prompt, length"):
        read_files([path])


def test_cli_import_then_show(tmp_path):
    d = polytrace_dir(tmp_path)
    out = tmp_path / "w.yaml"
    res = runner.invoke(
        app,
        [
            "workload",
            "import",
            str(d),
            "--out",
            str(out),
            "--cap",
            "2048",
            "--base",
            "cpu-tiny",
            "--mode",
            "empirical",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output and (tmp_path / "w.lengths.parquet").is_file()
    assert load_workload(out).lengths.kind == "empirical"
    shown = runner.invoke(app, ["workload", "show", str(out)])
    assert (
        shown.exit_code == 0
        and "kind: empirical" in shown.output
        and "KS statistic" in shown.output
    )


def test_a_cap_heavy_file_is_fitted_with_its_mass_at_the_cap():
    true = LengthModel(clip_ratio=0.12, sigma=0.9, mean_accuracy=0.6, wrong_factor=2.0)
    rng = np.random.default_rng(4)
    s = sample_step(true, 2048, 400, 8, 0, rng)
    obs = from_frame(
        pd.DataFrame(
            [(0, int(p), -1, -1, int(x), -1, -1) for p, x in zip(s.prompt, s.lengths)],
            columns=list(COLUMNS),
        )
    )
    fit = fit_mixture(obs, 2048)
    clip = next(r for r in fit.rows if r.quantity == "clip_ratio")
    assert clip.observed > 0.1 and abs(clip.error) <= 0.02 and fit.ok


def test_a_polytrace_run_directory_as_published_imports_its_siblings_read_or_skipped(tmp_path):
    """PolyTrace publishes reward_timings_step_*.jsonl beside the length files (its rllm runs): read
    for the report; any other file of a listed directory is skipped and named; named on its own
    it is refused."""
    d = polytrace_dir(tmp_path)
    rewards = [
        {
            "step": s,
            "rank": r,
            "tp_rank": 0,
            "dp_rank": r // 4,
            "batch_size": 64,
            "reward_time_s": 70.0 + s + r,
            "response_sum": 630511,
            "response_mean": 9851.7,
            "response_max": 16000,
            "validate": False,
        }
        for s in range(2)
        for r in (0, 4)
    ]
    for s in range(2):
        (d / f"reward_timings_step_{s}.jsonl").write_text(
            "".join(json.dumps(x) + "\n" for x in rewards if x["step"] == s))
    (d / "notes.csv").write_text("a,b\n1,2\n")
    (d / "README.md").write_text("# a run\n")
    res = import_workload([d], tmp_path / "w.yaml", BASE, cap=2048)
    text = "\n".join(res.lines)
    assert "32 responses" in text
    assert (
        "reward_timings_step_0.jsonl, reward_timings_step_1.jsonl: reward scoring 70.0-75.0 s"
        in text
    )
    assert "skipped (not lengths): notes.csv" in text
    with pytest.raises(ConfigError, match="notes.csv"):
        read_files([d / "notes.csv"])


def test_without_a_cluster_the_import_refuses_naming_the_flags_and_writes_nothing(tmp_path):
    """A length file carries no cluster: with neither the cluster flags nor --base the command asks
    for them (exit 2, nothing written), as What-if's cluster boxes do."""
    path = tmp_path / "l.csv"
    generic_frame().to_csv(path, index=False)
    res = runner.invoke(app, ["workload", "import", str(path), "--out", str(tmp_path / "w.yaml")])
    assert res.exit_code == 2, res.output
    for flag in ("--model", "--gpu", "--tp", "--framework", "--engines", "--base"):
        assert flag in res.output
    assert not list(tmp_path.glob("w*"))
    half = runner.invoke(app, ["workload", "import", str(path), "--out", str(tmp_path / "w.yaml"),
                               "--model", "qwen2.5-7b", "--gpu", "h100"])
    assert half.exit_code == 2 and "--tp, --framework: not given" in half.output
    assert not list(tmp_path.glob("w*"))


def test_the_cluster_flags_put_the_lengths_on_that_cluster(tmp_path, monkeypatch):
    """--model --gpu --tp --framework: the workload runs on that cluster (its profile derived from
    the measured database, written beside it); engines default to the files' data-parallel ranks."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "w.yaml"
    res = runner.invoke(app, ["workload", "import", str(polytrace_dir(tmp_path)), "--out",
                              str(out), "--cap", "2048", "--model", "qwen2.5-7b", "--gpu", "h100",
                              "--tp", "1", "--framework", "vllm"])
    assert res.exit_code == 0, res.output
    wl = load_workload(out)
    assert (wl.model, wl.gpu, wl.framework, wl.gpus_per_worker) == ("qwen2.5-7b", "h100", "vllm", 1)
    assert wl.workers == 2 and "2 data-parallel ranks" in res.output  # ranks 0 and 4
    prof = load_profile(wl.profile)
    assert Path(wl.profile) == tmp_path / "w.profile.yaml" and prof.cluster.gpu == "h100"
    check_workload_profile(wl, prof)
    (tmp_path / "b").mkdir()
    again = runner.invoke(app, ["workload", "import", str(polytrace_dir(tmp_path / "b")), "--out",
                                str(out), "--cap", "2048", "--model", "qwen2.5-7b", "--gpu",
                                "h100", "--tp", "1", "--framework", "vllm", "--engines", "8"])
    assert again.exit_code == 0 and load_workload(out).workers == 8


def test_a_summary_without_a_base_is_refused_for_its_missing_shape(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "metrics.csv"
    pd.DataFrame({"step": [1, 2], "response_length/mean": [500.0, 550.0],
                  "response_length/max": [8000.0, 8500.0]}).to_csv(path, index=False)
    with pytest.raises(ConfigError, match="--base WORKLOAD for the shape"):
        import_workload([path], tmp_path / "w.yaml", None, cap=20480,
                        placement=Placement(load_profile("h100-qwen2.5-7b-tp1-sglang")))
    assert not list(tmp_path.glob("w*"))
