"""The cost fit's NNLS (numpy, Lawson and Hanson) solves what scipy's solves, and never aborts."""

import numpy as np
from scipy.optimize import nnls as scipy_nnls

from workbench.calibrate.captures.robust import nnls


def test_it_finds_scipys_solution_on_random_systems_with_dead_columns():
    rng = np.random.default_rng(7)
    for _ in range(300):
        m, n = int(rng.integers(3, 30)), int(rng.integers(1, 8))
        A = rng.normal(size=(m, n)) * rng.uniform(0.01, 100, size=n)
        if rng.random() < 0.3:
            A[:, rng.integers(n)] = 0.0
        b = rng.normal(size=m) * 10
        ours, (theirs, _) = nnls(A, b, 50 * n), scipy_nnls(A, b, maxiter=50 * n)
        assert (ours >= 0).all()
        assert np.allclose(ours, theirs, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(theirs).max()))


def test_degenerate_systems_give_an_answer():
    assert nnls(np.zeros((3, 2)), np.ones(3)).tolist() == [0.0, 0.0]
    assert nnls(np.ones((1, 3)), np.array([-1.0])).tolist() == [0.0, 0.0, 0.0]
    x = nnls(np.array([[1e-300, 1e300], [1.0, 0.0]]), np.array([1.0, 2.0]))
    assert np.isfinite(x).all() and (x >= 0).all()
