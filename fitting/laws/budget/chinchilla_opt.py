"""Numerical optimiser behind :mod:`fitting.laws.budget.chinchilla` (whose public API most callers
want): the Hoffmann et al. 2022 / Besiroglu et al. 2024 objective for L(N, D) = E + A/N^α + B/D^β,
Σ_i Huber_δ(LSE(a − α log N_i, b − β log D_i, e) − log L_i), in log space, numpy/scipy only.

:func:`huber_objective` (with its analytic gradient, batched over starts), :func:`multi_start`
(a vectorised L-BFGS over every start at once), :func:`varpro_starts` (exact NNLS for E, A, B
per exponent pair), :func:`lbfgs_polish` and :func:`irls_polish` (polishing through the Huber
kinks; ``_many`` forms polish many points in one pass), :func:`refit` / :func:`refit_many` (the
bootstrap's refits) and :func:`profile_check` (``init="auto"``'s check on a lattice of
exponents).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import nnls

# -- objective, batched over starts -------------------------------------------------------------


def to_theta(free: np.ndarray, tied: bool) -> np.ndarray:
    """Free parameters (a, b, e, α[, β]) → full θ = (a, b, e, α, β) (β = α when tied)."""
    free = np.asarray(free, dtype=float)
    if not tied:
        return free
    return np.concatenate([free, free[..., 3:4]], axis=-1)


def unpack(theta: np.ndarray) -> tuple[np.ndarray, ...]:
    return theta[..., 0], theta[..., 1], theta[..., 2], theta[..., 3], theta[..., 4]


def _lse_terms(theta: np.ndarray, x: np.ndarray, z: np.ndarray):
    """LSE(a − α x, b − β z, e) for θ of shape (S, 5): (lse, w1, w2, w3), each (S, n)."""
    a, b, e, al, be = (t[:, None] for t in unpack(theta))
    u1 = a - al * x
    u2 = b - be * z
    u3 = np.broadcast_to(e, u1.shape)
    m = np.maximum(np.maximum(u1, u2), u3)
    e1, e2, e3 = np.exp(u1 - m), np.exp(u2 - m), np.exp(u3 - m)
    s = e1 + e2 + e3
    return m + np.log(s), e1 / s, e2 / s, e3 / s


def _huber(r: np.ndarray, delta: float) -> np.ndarray:
    ar = np.abs(r)
    return np.where(ar <= delta, 0.5 * r * r, delta * (ar - 0.5 * delta))


def huber_objective(theta: np.ndarray, x, z, y, delta: float) -> np.ndarray:
    """Σ_i Huber_δ(LSE(a − α log N_i, b − β log D_i, e) − log L_i) for each row of θ (S, 5)."""
    lse = _lse_terms(theta, x, z)[0]
    return _huber(lse - y, delta).sum(axis=1)


def _obj_grad(free: np.ndarray, x, z, y, delta: float, tied: bool):
    """Objective (S,) and analytic gradient (S, k) w.r.t. the free parameters."""
    theta = to_theta(free, tied)
    lse, w1, w2, w3 = _lse_terms(theta, x, z)
    r = lse - y
    f = _huber(r, delta).sum(axis=1)
    h = np.clip(r, -delta, delta)  # Huber ψ(r)
    hw1, hw2 = h * w1, h * w2
    ga, gb, ge = hw1.sum(1), hw2.sum(1), (h * w3).sum(1)
    gal, gbe = -(hw1 @ x), -(hw2 @ z)
    if tied:
        g = np.stack([ga, gb, ge, gal + gbe], axis=1)
    else:
        g = np.stack([ga, gb, ge, gal, gbe], axis=1)
    return f, g


def multi_start(starts: np.ndarray, x, z, y, delta: float, tied: bool, *, memory: int = 10,
                max_iter: int = 400, ftol: float = 1e-10, gtol: float = 1e-9,
                chunk_elems: int = 2_000_000):
    """L-BFGS (two-loop recursion, Armijo backtracking) run on every start at once.

    Each start keeps its own history and step length; converged starts leave the active set.
    Returns the end points (S, k) and their objectives (S,).
    """
    starts = np.array(starts, dtype=float)
    chunk = max(1, chunk_elems // max(len(y), 1))  # bound memory: starts × points per pass
    with np.errstate(over="ignore", invalid="ignore"):
        parts = [_multi_start(starts[i:i + chunk], x, z, y, delta, tied, memory, max_iter,
                              ftol, gtol) for i in range(0, len(starts), chunk)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _multi_start(X, x, z, y, delta, tied, memory, max_iter, ftol, gtol):
    S, k = X.shape
    F, G = _obj_grad(X, x, z, y, delta, tied)
    s_hist = np.zeros((S, memory, k))
    y_hist = np.zeros((S, memory, k))
    rho = np.zeros((S, memory))  # 0 marks an empty slot
    active = np.isfinite(F)
    for it in range(max_iter):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        g = G[idx]
        # two-loop recursion; slots ordered newest = (it-1) % memory backwards
        q = g.copy()
        order = [(it - 1 - j) % memory for j in range(memory)]
        alphas = np.zeros((idx.size, memory))
        for j in order:
            rj = rho[idx, j]
            alphas[:, j] = rj * np.einsum("ij,ij->i", s_hist[idx, j], q)
            q -= alphas[:, j, None] * y_hist[idx, j]
        newest = order[0]
        sy = np.einsum("ij,ij->i", s_hist[idx, newest], y_hist[idx, newest])
        yy = np.einsum("ij,ij->i", y_hist[idx, newest], y_hist[idx, newest])
        gamma = np.where((rho[idx, newest] > 0) & (yy > 0), sy / np.where(yy > 0, yy, 1), 0.0)
        gnorm = np.linalg.norm(g, axis=1)
        gamma = np.where(gamma > 0, gamma, 1.0 / np.maximum(gnorm, 1e-300) * 1e-2)
        rvec = gamma[:, None] * q
        for j in reversed(order):
            rj = rho[idx, j]
            beta_j = rj * np.einsum("ij,ij->i", y_hist[idx, j], rvec)
            rvec += (alphas[:, j] - beta_j)[:, None] * s_hist[idx, j]
        p = -rvec
        slope = np.einsum("ij,ij->i", p, g)
        bad = ~(slope < 0)
        p[bad] = -g[bad] * (1e-2 / np.maximum(gnorm[bad], 1e-300))[:, None]
        slope[bad] = np.einsum("ij,ij->i", p[bad], g[bad])
        # vectorised Armijo backtracking
        step = np.ones(idx.size)
        f0 = F[idx]
        x_new = X[idx] + p
        f_new, g_new = _obj_grad(x_new, x, z, y, delta, tied)
        for _ in range(30):
            ok = np.isfinite(f_new) & (f_new <= f0 + 1e-4 * step * slope)
            if ok.all():
                break
            nb = ~ok
            step[nb] *= 0.5
            x_new[nb] = X[idx[nb]] + step[nb, None] * p[nb]
            f_nb, g_nb = _obj_grad(x_new[nb], x, z, y, delta, tied)
            f_new[nb], g_new[nb] = f_nb, g_nb
        ok = np.isfinite(f_new) & (f_new <= f0 + 1e-4 * step * slope)
        s_vec = x_new - X[idx]
        y_vec = g_new - g
        sy = np.einsum("ij,ij->i", s_vec, y_vec)
        slot = it % memory
        store = ok & (sy > 1e-12 * np.linalg.norm(s_vec, axis=1) * np.linalg.norm(y_vec, axis=1))
        rho[idx, slot] = np.where(store, 1.0 / np.where(store, sy, 1.0), 0.0)
        s_hist[idx, slot] = np.where(store[:, None], s_vec, 0.0)
        y_hist[idx, slot] = np.where(store[:, None], y_vec, 0.0)
        upd = idx[ok]
        X[upd], F[upd], G[upd] = x_new[ok], f_new[ok], g_new[ok]
        rel = (f0 - f_new) / np.maximum(np.abs(f0), 1e-300)
        done = ~ok | (ok & (rel < ftol)) | (np.abs(g_new).max(axis=1) < gtol)
        active[idx[done]] = False
    return X, F


def varpro_starts(starts: np.ndarray, n: np.ndarray, d: np.ndarray, loss: np.ndarray,
                  tied: bool) -> np.ndarray:
    """Replace each start's linear parameters (a, b, e) by the non-negative least-squares fit of
    L ≈ E + A N^−α + B D^−β at that start's exponents (variable projection); dedupe exponents."""
    expo = np.unique(np.round(starts[:, 3:], 12), axis=0)
    out = []
    floor = 1e-6 * float(np.mean(loss))
    for ex in expo:
        al = ex[0]
        be = ex[0] if tied else ex[1]
        # scale columns to unit norm for conditioning; α = 0 duplicates the constant column
        cols = np.stack([np.ones_like(loss), n ** (-al), d ** (-be)], axis=1)
        scale = np.linalg.norm(cols, axis=0)
        coef, _ = nnls(cols / scale, loss)
        E, A, B = np.maximum(coef / scale, [floor, floor * n.min() ** al, floor * d.min() ** be])
        out.append([math.log(A), math.log(B), math.log(E), *ex])
    return np.array(out)


def profile_check(starts: np.ndarray, n: np.ndarray, d: np.ndarray, loss: np.ndarray,
                  delta: float, tied: bool, size: int = 21) -> tuple[float, np.ndarray]:
    """Lowest objective on a lattice of exponents at variable-projection coefficients.

    The lattice has ``size`` evenly spaced values of each exponent over the range that the
    starts span (α, β ∈ [0, 2] in steps of 0.1 for the published grid); at each lattice point
    E, A, B are the non-negative least-squares fit of L ≈ E + A N^−α + B D^−β (as in
    :func:`varpro_starts`, solved for all points at once). Every value is the objective of an
    actual θ, so a value below a fit's optimum proves that optimum is not the global one (the
    converse does not hold: the check is cheap, not exhaustive). Returns the lowest objective
    and its θ (free parameters)."""
    ex = np.asarray(starts, dtype=float)[:, 3:]
    axes = [np.unique(np.linspace(ex[:, j].min(), ex[:, j].max(), size))
            for j in range(ex.shape[1])]
    mesh = np.meshgrid(*axes, indexing="ij")
    expo = np.stack([m.ravel() for m in mesh], axis=1)
    al, be = expo[:, 0], expo[:, -1]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        cols = np.stack([np.ones((len(expo), len(loss))), n[None, :] ** -al[:, None],
                         d[None, :] ** -be[:, None]], axis=2)
        coef = _nnls_many(cols, loss)
        floor = 1e-6 * float(np.mean(loss))
        lin = np.maximum(coef, np.stack([np.full_like(al, floor), floor * n.min() ** al,
                                         floor * d.min() ** be], axis=1))
        free = np.column_stack([np.log(lin[:, 1]), np.log(lin[:, 2]), np.log(lin[:, 0]), expo])
        f = huber_objective(to_theta(free, tied), np.log(n), np.log(d), np.log(loss), delta)
    f = np.where(np.isfinite(f), f, np.inf)
    i = int(np.argmin(f))
    return float(f[i]), free[i]


def _nnls_many(cols: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Non-negative least squares min ‖C_p c − t‖, c ≥ 0, for a stack of small C_p (P, n, m).

    The solution is the least-squares fit on its own support, so it is the best non-negative
    one among the least-squares fits on every subset of columns (2^m − 1 of them, m = 3 here),
    each solved for the whole stack at once from the normal equations (columns scaled to unit
    norm; a 1e-12 ridge, since α = 0 repeats the constant column)."""
    scale = np.linalg.norm(cols, axis=1, keepdims=True)
    scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
    C = cols / scale
    G = np.swapaxes(C, 1, 2) @ C
    b = (np.swapaxes(C, 1, 2) @ target[:, None])[..., 0]
    tt = float(target @ target)
    m = C.shape[2]
    best, best_rss = np.zeros((len(C), m)), np.full(len(C), tt)
    for mask in range(1, 2**m):
        sub = [j for j in range(m) if mask >> j & 1]
        Gs, bs = G[:, sub][:, :, sub], b[:, sub]
        c = np.linalg.solve(Gs + 1e-12 * np.eye(len(sub)), bs[..., None])[..., 0]
        rss = tt - 2 * np.sum(c * bs, axis=1) + np.sum(c * (Gs @ c[..., None])[..., 0], axis=1)
        ok = np.all(c >= 0, axis=1) & np.isfinite(rss) & (rss < best_rss)
        full = np.zeros((len(C), m))
        full[:, sub] = c
        best[ok], best_rss[ok] = full[ok], rss[ok]
    return best / scale[:, 0, :]


def lbfgs_polish(free: np.ndarray, x, z, y, delta: float, tied: bool) -> np.ndarray:
    """One start run to tight tolerances with the same L-BFGS (scipy's L-BFGS-B adds ~7 ms of
    overhead per iteration here, more than the 240-point objective itself)."""
    return lbfgs_polish_many(np.asarray(free, dtype=float)[None, :], x, z, y, delta, tied)[0]


def lbfgs_polish_many(free: np.ndarray, x, z, y, delta: float, tied: bool) -> np.ndarray:
    """:func:`lbfgs_polish` of every row of ``free`` (S, k) in one vectorised L-BFGS run: each row
    keeps its own history and stopping test, so a row ends where it would alone, while one numpy
    pass per iteration serves all rows. A row that would get worse is returned unchanged."""
    v0 = np.array(free, dtype=float, ndmin=2)
    X, F = multi_start(v0, x, z, y, delta, tied, max_iter=3000, ftol=1e-15, gtol=1e-12)
    with np.errstate(over="ignore", invalid="ignore"):
        f0 = _obj_grad(v0, x, z, y, delta, tied)[0]
    keep = np.isfinite(F) & (F <= f0)
    return np.where(keep[:, None], X, v0)


#: the IRLS's iteration cap and relative-improvement stopping test
_IRLS_MAX_ITER, _IRLS_TOL = 200, 1e-11


def irls_polish(free: np.ndarray, x, z, y, delta: float, tied: bool,
                max_iter: int = _IRLS_MAX_ITER, tol: float = _IRLS_TOL) -> np.ndarray:
    """Levenberg–Marquardt on IRLS weights ω = ψ(r)/r: converges through the Huber kinks."""
    v = np.asarray(free, dtype=float)[None, :]
    return irls_polish_many(v, x, z, y, delta, tied, max_iter=max_iter, tol=tol)[0]


def irls_polish_many(free: np.ndarray, x, z, y, delta: float, tied: bool,
                     max_iter: int = _IRLS_MAX_ITER, tol: float = _IRLS_TOL) -> np.ndarray:
    """:func:`irls_polish` of every row of ``free`` (S, k) at once, each row with its own damping
    λ and stopping test. ``x``, ``z``, ``y`` are shared (n,) or one row of data per start (S, n)
    (the bootstrap's resamples). Each outer iteration solves ``(H + λ diag(H)) s = −g`` with the
    Gauss–Newton H = Jᵀ ω J and g = Jᵀ ψ(r); a step is kept when it does not raise the objective
    (λ ÷ 10), otherwise λ × 10 and retry (at most 20 times); a row stops when its accepted step
    improves the objective by less than ``tol`` (relative) or no step is accepted."""
    return _irls_many(free, x, z, y, delta, tied, max_iter, tol)[0]


def _irls_many(free, x, z, y, delta, tied, max_iter, tol) -> tuple[np.ndarray, np.ndarray]:
    """:func:`irls_polish_many`'s end points and, per row, whether it converged: stopped by its
    own test before ``max_iter`` iterations (the IRLS's counterpart of
    :func:`fitting.core.engine.converged`, which judges scipy's optimisers)."""
    v = np.array(free, dtype=float, ndmin=2)
    x, z, y = (np.broadcast_to(np.asarray(a, dtype=float), (len(v), np.shape(a)[-1]))
               for a in (x, z, y))
    with np.errstate(over="ignore", invalid="ignore"):
        f = _row_objective(v, x, z, y, delta, tied)
        lam = np.full(len(v), 1e-6)
        active = np.ones(len(v), dtype=bool)
        for _ in range(max_iter):
            idx = np.flatnonzero(active)
            if idx.size == 0:
                break
            H, g = _gauss_newton(v[idx], x[idx], z[idx], y[idx], delta, tied)
            improved = _lm_steps(v, f, lam, idx, H, g, (x, z, y, delta, tied), tol)
            active[idx[~improved]] = False
    return v, ~active


def _row_objective(v, x, z, y, delta, tied) -> np.ndarray:
    """Huber objective of each row of v against its own row of data (x, z, y: (S, n))."""
    lse = _lse_terms(to_theta(v, tied), x, z)[0]
    return _huber(lse - y, delta).sum(axis=1)


def _gauss_newton(v, x, z, y, delta, tied):
    """IRLS Gauss–Newton system per row: H = Jᵀ diag(ω) J (S, k, k), g = Jᵀ ψ(r) (S, k)."""
    lse, w1, w2, w3 = _lse_terms(to_theta(v, tied), x, z)
    r = lse - y
    psi = np.clip(r, -delta, delta)
    omega = np.where(np.abs(r) <= delta, 1.0, delta / np.maximum(np.abs(r), 1e-300))
    if tied:
        J = np.stack([w1, w2, w3, -x * w1 - z * w2], axis=2)
    else:
        J = np.stack([w1, w2, w3, -x * w1, -z * w2], axis=2)
    H = np.einsum("snk,snl->skl", J * omega[..., None], J)
    return H, np.einsum("snk,sn->sk", J, psi)


def _lm_steps(v, f, lam, idx, H, g, data, tol) -> np.ndarray:
    """One damped step for each row ``idx`` (retrying with λ × 10 up to 20 times); updates v, f
    and λ in place and returns, per row, whether the accepted step improved f by more than tol."""
    x, z, y, delta, tied = data
    diag = np.diagonal(H, axis1=1, axis2=2) + 1e-12
    improved = np.zeros(idx.size, dtype=bool)
    pending = np.ones(idx.size, dtype=bool)
    for _ in range(20):
        p = np.flatnonzero(pending)
        if p.size == 0:
            break
        rows = idx[p]
        A = H[p] + lam[rows, None, None] * (diag[p, :, None] * np.eye(H.shape[1]))
        step, solved = _solve_rows(A, -g[p])
        lam[rows[~solved]] *= 10
        p, rows, step = p[solved], rows[solved], step[solved]
        v_new = v[rows] + step
        f_new = _row_objective(v_new, x[rows], z[rows], y[rows], delta, tied)
        ok = np.isfinite(f_new) & (f_new <= f[rows])
        acc = rows[ok]
        improved[p[ok]] = f[acc] - f_new[ok] > tol * np.maximum(f[acc], 1e-300)
        v[acc], f[acc] = v_new[ok], f_new[ok]
        lam[acc] = np.maximum(lam[acc] / 10, 1e-12)
        lam[rows[~ok]] *= 10
        pending[p[ok]] = False
    return improved


def _solve_rows(A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Solve A_s x_s = b_s for each row; rows whose matrix is singular get solved = False."""
    try:
        return np.linalg.solve(A, b[..., None])[..., 0], np.ones(len(A), dtype=bool)
    except np.linalg.LinAlgError:
        out, solved = np.zeros_like(b), np.ones(len(A), dtype=bool)
        for i in range(len(A)):
            try:
                out[i] = np.linalg.solve(A[i], b[i])
            except np.linalg.LinAlgError:
                solved[i] = False
        return out, solved


def refit(starts: np.ndarray, x, z, y, delta, tied) -> np.ndarray:
    """Best polished optimum from a few starts (used by the bootstrap)."""
    return refit_many(starts, x[None, :], z[None, :], y[None, :], delta, tied)[0]


def refit_many(starts: np.ndarray, x, z, y, delta: float, tied: bool,
               converged: np.ndarray | None = None) -> np.ndarray:
    """:func:`refit` of many data sets at once: ``x``, ``z``, ``y`` are (B, n), one resample per
    row; every start is IRLS-polished on every resample in one batch and the best per resample
    (the first on ties) is returned, (B, k). ``converged``: a (B,) bool array, filled with
    whether each returned polish converged (stopped by its own test within its iterations)."""
    seeds = np.array(starts, dtype=float, ndmin=2)
    m = len(seeds)
    x, z, y = (np.repeat(np.asarray(a, dtype=float), m, axis=0) for a in (x, z, y))
    th, stopped = _irls_many(np.tile(seeds, (len(x) // m, 1)), x, z, y, delta, tied,
                             _IRLS_MAX_ITER, _IRLS_TOL)
    with np.errstate(over="ignore", invalid="ignore"):
        f = _row_objective(th, x, z, y, delta, tied)
    f = np.where(np.isfinite(f), f, np.inf).reshape(-1, m)
    best = np.argmin(f, axis=1)
    if converged is not None:
        converged[:] = stopped.reshape(len(f), m)[np.arange(len(f)), best]
    return th.reshape(len(f), m, -1)[np.arange(len(f)), best]
