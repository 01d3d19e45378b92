"""Kaplan et al. 2020's L(N, D) with an irreducible loss, per mixture weight (eq. 1.5 with
Caillaut et al. 2024 eq. 2's E and Fernandes et al. 2023 eq. 7's sharing):

    L_i(N, D; p) = E_i + [(A_{p,i}/N)^(α_i/β_i) + B_{p,i}/D]^β_i

the form in which the data and the parameter terms do not add (a small model gains less from
more data). Its prediction and one pair's fit: nonlinear least squares on relative residuals
with a robust loss from a grid of starts (analytic Jacobian), judged by
:func:`fitting.core.engine.converged`. :mod:`fitting.laws.budget.chinchilla_joint` calls it for
``form="kaplan"``; its limits and effective shares: docs/reference/laws.md, "L(N, D) across
mixture weights".
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.optimize import least_squares

from fitting.core.base import FitError
from fitting.core.engine import converged, require_converged

__all__ = ["fit_pair_kaplan", "predict_kaplan", "KAPLAN_EXPONENT_BOUNDS"]

#: bounds of α and β in this form
KAPLAN_EXPONENT_BOUNDS = (0.01, 8.0)
_STARTS = {"alpha": (0.5, 1.5), "beta": (0.7, 2.0, 4.0), "E": (0.5, 0.9)}
_LOG_BOUND = 200.0
# evaluations per start and for the final polish: flat data (no decrease to follow) leave the
# scales unpinned, where an unbounded search crawls
_START_NFEV, _POLISH_NFEV = 200, 500


def _law_in_logs(e, alpha, beta, ln_a, ln_b, ln_n, ln_d) -> np.ndarray:
    """E + [(A/N)^(α/β) + B/D]^β from the logs of A, B, N and D."""
    with np.errstate(over="ignore"):
        inner = np.exp((alpha / beta) * (ln_a - ln_n)) + np.exp(ln_b - ln_d)
        return e + inner ** beta


def predict_kaplan(e: float, alpha: float, beta: float, a, b, n, d) -> np.ndarray:
    """E + [(A/N)^(α/β) + B/D]^β (module docstring), computed in logs."""
    with np.errstate(divide="ignore"):
        ln_a, ln_b, ln_n, ln_d = (np.log(np.asarray(x, dtype=np.float64)) for x in (a, b, n, d))
    return _law_in_logs(e, alpha, beta, ln_a, ln_b, ln_n, ln_d)


def _model(q: np.ndarray, ln_n, ln_d, idx, k: int) -> np.ndarray:
    """The law at θ = (E, α, β, log A_p…, log B_p…), each point at its weight's scales."""
    return _law_in_logs(q[0], q[1], q[2], q[3:3 + k][idx], q[3 + k:3 + 2 * k][idx], ln_n, ln_d)


def _jacobian(q: np.ndarray, ln_n, ln_d, idx, k: int, y) -> np.ndarray:
    """∂((L̂ − L)/L)/∂θ: with S = T1 + T2, T1 = (A/N)^(α/β), T2 = B/D and L̂ = E + S^β,
    ∂L̂/∂α = S^(β−1) T1 ln(A/N), ∂L̂/∂β = S^β ln S − (α/β) S^(β−1) T1 ln(A/N),
    ∂L̂/∂log A = α S^(β−1) T1, ∂L̂/∂log B = β S^(β−1) T2."""
    alpha, beta = q[1], q[2]
    la, lb = q[3:3 + k][idx], q[3 + k:3 + 2 * k][idx]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        t1, t2 = np.exp((alpha / beta) * (la - ln_n)), np.exp(lb - ln_d)
        s = t1 + t2
        s_b1 = s ** (beta - 1.0)
        jac = np.zeros((y.size, 3 + 2 * k))
        jac[:, 0] = 1.0
        jac[:, 1] = s_b1 * t1 * (la - ln_n)
        jac[:, 2] = s ** beta * np.log(s) - (alpha / beta) * s_b1 * t1 * (la - ln_n)
        rows = np.arange(y.size)
        jac[rows, 3 + idx] = alpha * s_b1 * t1
        jac[rows, 3 + k + idx] = beta * s_b1 * t2
    jac /= y[:, None]
    return np.where(np.isfinite(jac), jac, 0.0)


def _starts(y, ln_n, ln_d, k: int):
    """Starts where each term is about half of (median loss − E) at the median N and D."""
    for alpha, beta, e_share in itertools.product(_STARTS["alpha"], _STARTS["beta"], _STARTS["E"]):
        e = e_share * float(y.min())
        half = max(float(np.median(y)) - e, 1e-6) / 2
        la = float(np.median(ln_n)) + np.log(half) / alpha
        lb = float(np.median(ln_d)) + np.log(half) / beta
        yield np.r_[e, alpha, beta, np.full(k, la), np.full(k, lb)]


def fit_pair_kaplan(n, d, p, y, *, loss: str = "soft_l1", f_scale: float | str = "auto",
                    theta0: dict | None = None, status: dict | None = None
                    ) -> tuple[dict, float]:
    """One pair's fit: returns its parameters (``E``, ``alpha``, ``beta``, ``("A", w)``,
    ``("B", w)`` per weight w) and the f_scale used. ``f_scale="auto"``: 1.4826 × the median
    absolute relative residual of a least-squares fit (a robust scale), at least 1e-3.
    ``theta0``: a previous fit's parameters, the one start (perturbation refits); such a refit
    whose last solve did not converge (:func:`fitting.core.engine.converged`, e.g. stopped at its
    evaluation cap) raises FitError. ``status``: a dict, filled with ``converged`` (bool),
    ``nfev`` and ``message`` of the last solve (a main fit that did not converge is returned)."""
    n, d, p, y = (np.asarray(x, dtype=np.float64) for x in (n, d, p, y))
    ws = np.unique(p)
    k = ws.size
    idx = np.searchsorted(ws, p)
    ln_n, ln_d = np.log(n), np.log(d)
    lo_e, hi_e = KAPLAN_EXPONENT_BOUNDS
    lower = np.r_[0.0, lo_e, lo_e, np.full(2 * k, -_LOG_BOUND)]
    upper = np.r_[float(y.min()), hi_e, hi_e, np.full(2 * k, _LOG_BOUND)]

    def resid(q):
        r = _model(q, ln_n, ln_d, idx, k) / y - 1.0
        return np.where(np.isfinite(r), r, 1e6)

    def solve(q0, how, scale, max_nfev):
        q0 = np.clip(q0, lower + 1e-12, upper - 1e-12)
        return least_squares(resid, q0, jac=lambda q: _jacobian(q, ln_n, ln_d, idx, k, y),
                             bounds=(lower, upper), loss=how, f_scale=scale, x_scale="jac",
                             max_nfev=max_nfev)

    if theta0 is not None:
        starts = [np.r_[theta0["E"], theta0["alpha"], theta0["beta"],
                        [np.log(theta0[("A", float(w))]) for w in ws],
                        [np.log(theta0[("B", float(w))]) for w in ws]]]
    else:
        starts = list(_starts(y, ln_n, ln_d, k))
    best = None
    for q0 in starts:
        try:
            r = solve(q0, "linear", 1.0, _START_NFEV)
        except ValueError:
            continue
        if best is None or r.cost < best.cost:
            best = r
    if best is None or not np.all(np.isfinite(best.x)):
        raise FitError("the Kaplan L(N, D) fit found no finite solution from any start")
    scale = f_scale
    if f_scale == "auto":
        scale = max(1.4826 * float(np.median(np.abs(best.fun))), 1e-3)
    if loss != "linear":
        best = solve(best.x, loss, float(scale), _POLISH_NFEV)
    if theta0 is not None:
        require_converged(best, "Kaplan L(N, D) refit")
    if status is not None:
        status.update(converged=converged(best), nfev=int(best.nfev), message=str(best.message))
    q = best.x
    out = {"E": float(q[0]), "alpha": float(q[1]), "beta": float(q[2])}
    for j, w in enumerate(ws):
        out[("A", float(w))] = float(np.exp(q[3 + j]))
        out[("B", float(w))] = float(np.exp(q[3 + k + j]))
    return out, float(scale)
