"""real/experiments/check_probe.py: its inputs (no engines start: bad input is refused first)."""

from __future__ import annotations

import pytest

from real.experiments.check_probe import main, step_requests


def test_a_step_share_is_groups_times_samples_sampled_alike():
    reqs = step_requests(3, 4, 512, seed=1, variant="gcd")
    assert [(r.prompt_id, r.sample) for r in reqs] == [(i, j) for i in range(3) for j in range(4)]
    assert len({r.sampling for r in reqs}) == 1 and reqs[0].sampling.temperature == 1.0
    assert reqs[0].sampling.max_tokens == 512
    assert step_requests(3, 4, 512, seed=1, variant="gcd") == reqs  # seeded


def test_bad_input_names_the_option(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--model", str(tmp_path)])
    assert f"--model {tmp_path}: no config.json" in capsys.readouterr().err
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SystemExit):
        main(["--model", str(tmp_path)])  # not a shipped model: no drafter beside it
    assert "give --drafter DIR" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--model", str(tmp_path), "--rounds", "0"])
    assert "--rounds" in capsys.readouterr().err
