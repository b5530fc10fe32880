"""Robust non-negative linear fits on relative residuals, the solver under the cost fit (costs.py).

Step times span orders of magnitude and noise on a busy machine is multiplicative, so the columns
come divided by the measured time; `identifiable` gives up columns the data cannot separate, and
`robust_fit` minimises scipy's soft-l1 loss by iteratively reweighted NNLS. The NNLS is Lawson and
Hanson's active-set method in numpy (`nnls`): scipy 1.17's compiled one freed memory twice and
aborted the process on a damaged profiler file (the CLI fuzz found it), and these systems have a
handful of columns.
"""

from __future__ import annotations

import numpy as np

# A feature whose part not explained by the others is under 5% of it is not identified.
COLLINEAR_TOL = 0.05


def identifiable(
    X: np.ndarray, y: np.ndarray, tol: float = COLLINEAR_TOL
) -> tuple[list[int], dict[int, str]]:
    """Columns the data can fit: nonzero, and not (nearly) a combination of the others.

    Works on relative-residual weighted, unit-norm columns; when several are
    collinear, the one latest in column order is given up first (costs.py's COST_PARAMS order:
    earlier = kept)."""
    A = X / y[:, None]
    norms = np.linalg.norm(A, axis=0)
    empty = [j for j in range(A.shape[1]) if norms[j] <= 1e-12 * max(norms.max(), 1e-300)]
    no_steps = "no such steps among those fitted (warm-up and empty steps are left out)"
    why = {j: no_steps for j in empty}
    active = [j for j in range(A.shape[1]) if j not in why]
    while len(active) > 1:
        An = A[:, active] / norms[active]
        unexplained = []
        for idx in range(len(active)):
            others = np.delete(An, idx, axis=1)
            coef, *_ = np.linalg.lstsq(others, An[:, idx], rcond=None)
            unexplained.append(float(np.linalg.norm(An[:, idx] - others @ coef)))
        bad = [idx for idx, u in enumerate(unexplained) if u < tol]
        if not bad:
            break
        drop = max(bad, key=lambda idx: active[idx])  # latest in keep order
        why[active[drop]] = (
            f"collinear with the other features (unexplained part {unexplained[drop]:.1%})"
        )
        active.pop(drop)
    return active, why


def nnls(A: np.ndarray, b: np.ndarray, maxiter: int | None = None) -> np.ndarray:
    """min ||A x - b|| with x >= 0 (Lawson and Hanson's active set; scipy's `nnls`, in numpy)."""
    m, n = A.shape
    maxiter = maxiter or 3 * n
    x, passive = np.zeros(n), np.zeros(n, bool)
    tol = 10 * np.finfo(float).eps * max(m, n) * max(np.abs(A).sum(axis=0).max(initial=0), 1e-300)
    w = A.T @ b
    it = 0
    while (~passive).any() and np.where(passive, -np.inf, w).max() > tol and it < maxiter:
        passive[int(np.argmax(np.where(passive, -np.inf, w)))] = True
        while it < maxiter:
            it += 1
            s = np.zeros(n)
            s[passive] = np.linalg.lstsq(A[:, passive], b, rcond=None)[0]
            if s[passive].min(initial=np.inf) > 0:
                x = s  # the passive set's solution is feasible
                break
            # Step from x towards s until the first passive coefficient reaches zero.
            neg = passive & (s <= 0)
            gap = x[neg] - s[neg]
            alpha = float(np.min(np.where(gap > 0, x[neg] / np.where(gap > 0, gap, 1.0), 0.0)))
            x = x + alpha * (s - x)
            passive &= x > tol
            x[~passive] = 0.0
        w = A.T @ (b - A @ x)
    return x


def nnls_normal(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares through the normal equations: with A'A = L L', ||L' x - L^-1 A'b||
    has the same minimiser on a p x p system (fast for many rows; columns come unit-scaled)."""
    g = A.T @ A
    if not (np.isfinite(g).all() and np.isfinite(b).all()):  # the inputs were out of range
        raise ValueError("the cost fit's features or times are not finite numbers")
    g[np.diag_indices_from(g)] += 1e-12 * max(np.trace(g), 1e-300)
    try:
        low = np.linalg.cholesky(g)
    except np.linalg.LinAlgError:
        return nnls(A, b, maxiter=50 * A.shape[1])
    return nnls(low.T, np.linalg.solve(low, A.T @ b), maxiter=50 * A.shape[1])


def robust_fit(
    A: np.ndarray, b: np.ndarray, f_scale: float, iters: int = 50
) -> tuple[np.ndarray, float]:
    """min sum soft_l1(A x - b) with x >= 0: iteratively reweighted NNLS from the plain NNLS
    solution.

    soft_l1 is rho(r) = 2 f^2 (sqrt(1 + (r/f)^2) - 1) (scipy's `least_squares` loss of that
    name); each reweighted NNLS step (weights 1/sqrt(1 + (r/f)^2)) is a majorise-minimise step,
    so the loss never rises. Returns (x, loss)."""
    x = nnls_normal(A, b)
    def loss(r: np.ndarray) -> float:
        return float(np.sum(2 * f_scale**2 * (np.sqrt(1 + (r / f_scale) ** 2) - 1)))

    cur = loss(A @ x - b)
    for _ in range(iters):
        r = A @ x - b
        w = (1 + (r / f_scale) ** 2) ** -0.25  # square root of the IRLS weight
        x_new = nnls_normal(A * w[:, None], b * w)
        new = loss(A @ x_new - b)
        if new > cur - 1e-12 * max(cur, 1e-300):
            if new < cur:
                x, cur = x_new, new
            break
        x, cur = x_new, new
    return x, cur


def robust_scale(rel: np.ndarray) -> float:
    return float(max(1.4826 * np.median(np.abs(rel - np.median(rel))), 1e-4))
