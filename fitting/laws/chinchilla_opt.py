"""Numerical optimiser behind :mod:`fitting.laws.chinchilla` (whose public API most callers want).

Minimises the Hoffmann et al. 2022 / Besiroglu et al. 2024 objective for the Chinchilla form
L(N, D) = E + A/N^α + B/D^β (Caillaut et al. 2024 eq. 2), in log space:
Σ_i Huber_δ(LSE(a − α log N_i, b − β log D_i, e) − log L_i), with A = e^a, B = e^b, E = e^e.

- :func:`huber_objective` / ``_obj_grad``: the objective and its analytic gradient, batched over
  starts (rows of θ = (a, b, e, α, β), or (a, b, e, α) with tied exponents α = β);
- :func:`multi_start`: a vectorised L-BFGS run on every start at once;
- :func:`varpro_starts`: variable-projection starts (exact NNLS for E, A, B per exponent pair);
- :func:`lbfgs_polish`, :func:`irls_polish`: polishing of the best end points, the latter an
  iteratively reweighted Gauss–Newton (Levenberg–Marquardt) solve through the Huber kinks;
- :func:`refit`: best polished optimum from a few starts (the bootstrap's refit).

numpy/scipy only.
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


def lbfgs_polish(free: np.ndarray, x, z, y, delta: float, tied: bool) -> np.ndarray:
    """One start run to tight tolerances with the same L-BFGS (scipy's L-BFGS-B adds ~7 ms of
    overhead per iteration here, more than the 240-point objective itself)."""
    v0 = np.asarray(free, dtype=float)[None, :]
    X, F = multi_start(v0, x, z, y, delta, tied, max_iter=3000, ftol=1e-15, gtol=1e-12)
    f0 = _obj_grad(v0, x, z, y, delta, tied)[0][0]
    return X[0] if np.isfinite(F[0]) and F[0] <= f0 else v0[0]


def irls_polish(free: np.ndarray, x, z, y, delta: float, tied: bool, max_iter: int = 200,
                tol: float = 1e-11
                ) -> np.ndarray:
    """Levenberg–Marquardt on IRLS weights ω = ψ(r)/r: converges through the Huber kinks."""
    v = np.asarray(free, dtype=float).copy()
    f = _obj_grad(v[None, :], x, z, y, delta, tied)[0][0]
    lam = 1e-6
    for _ in range(max_iter):
        theta = to_theta(v, tied)[None, :]
        lse, w1, w2, w3 = (t[0] for t in _lse_terms(theta, x, z))
        r = lse - y
        psi = np.clip(r, -delta, delta)
        omega = np.where(np.abs(r) <= delta, 1.0, delta / np.maximum(np.abs(r), 1e-300))
        if tied:
            J = np.stack([w1, w2, w3, -x * w1 - z * w2], axis=1)
        else:
            J = np.stack([w1, w2, w3, -x * w1, -z * w2], axis=1)
        H = J.T @ (omega[:, None] * J)
        g = J.T @ psi
        improved = False
        for _ in range(20):
            try:
                step = np.linalg.solve(H + lam * np.diag(np.diag(H) + 1e-12), -g)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            v_new = v + step
            f_new = _obj_grad(v_new[None, :], x, z, y, delta, tied)[0][0]
            if np.isfinite(f_new) and f_new <= f:
                improved = f - f_new > tol * max(f, 1e-300)
                v, f = v_new, f_new
                lam = max(lam / 10, 1e-12)
                break
            lam *= 10
        if not improved:
            break
    return v


def refit(starts: np.ndarray, x, z, y, delta, tied) -> np.ndarray:
    """Best polished optimum from a few starts (used by the bootstrap)."""
    best, best_f = None, np.inf
    for s in starts:
        th = irls_polish(s, x, z, y, delta, tied)
        f = huber_objective(to_theta(th, tied)[None, :], x, z, y, delta)[0]
        if f < best_f:
            best, best_f = th, f
    return best
