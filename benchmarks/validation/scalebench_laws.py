"""The law forms of ScaleBench's three tasks (Li et al. 2026), as ParametricLaws with their boxes.

Each form is written here from its published formula; the boxes of plausible parameters are the
benchmark's own numbers. Farseer's L(N, D) has one form (X = [N, D]); the data-constrained task
ten forms of L(U, N, D) (X = [U, N, D]: unique tokens, parameters, tokens), the third of which is
Muennighoff et al. 2023's law (fitting.laws.budget.data_constrained); the domain-mixture task ten
forms of the five per-domain losses as functions of the five proportions (X = p, 5 outputs).
Every form takes a batch of parameter vectors T (p, b) and returns (b, n) or (b, n, 5).
"""

from __future__ import annotations

import numpy as np

from fitting.design import ParametricLaw
from fitting.laws.budget.data_constrained import DATA_CONSTRAINED_BOUNDS, data_constrained_loss
from fitting.laws.budget.farseer import FARSEER_BOUNDS, farseer_loss

EPS = 1e-12
K = 5  # domains


def _pos(x):
    return np.maximum(x, EPS)


# ---- data-constrained L(U, N, D): T rows are (b, 1) columns, X = [U, N, D] --------------------

def _dc1(T, U, N, D):
    A, a, B, b, E, g, d = T
    return A / N**a + B / D**b + E * U**g * N**d


def _dc2(T, U, N, D):
    a0, b, c, d, p, q, r = T
    return a0 + b * U**p + c * N**q + d * D**r


def _dc3(T, U, N, D):
    return data_constrained_loss(T, U, N, D)


def _dc4(T, U, N, D):
    L0, A, a, B, b, s, d = T
    q = D / _pos(s * U * N**d)
    return L0 + A * N ** (-a) + B * (D / (1 + q)) ** (-b)


def _dc5(T, U, N, D):
    A, a, B, b, E, g = T
    return A / N**a + B / (U**g * D ** (1 - g)) ** b + E


def _dc6(T, U, N, D):
    E, A, a, B, b, C, c, d = T
    factor = 1 + C * np.maximum(D / U - 1, 0) ** c * N**d
    return E + A * N ** (-a) + B * (D / _pos(factor)) ** (-b)


def _dc7(T, U, N, D):
    L0, A, apu, B, at, C, ap = T
    return L0 + A * (N * U) ** apu + B * D**at + C * N**ap


def _dc8(T, U, N, D):
    a, b, c, d, al, be, g = T
    return a + b / D**al + c / N**be + d * np.abs(np.log(U / D + 1)) ** g


def _dc9(T, U, N, D):
    A, a, B, b, C, g, Linf = T
    return A / N**a + B / D**b * (1 + C / U**g) + Linf


def _dc10(T, U, N, D):
    L0, A, B, a, b, k, q = T
    return L0 + A * N ** (-a) + B * (D ** (-b * q) + (k * U) ** (-b * q)) ** (1 / q)


_DC_FORMS = [
    (_dc1, [(1e-3, 1e9), (0.05, 2.0), (1e-3, 1e8), (0.05, 2.0), (-100, 200), (-0.5, 0.5),
            (-0.5, 0.5)]),
    (_dc2, [(-3, 10), (-1e6, 1e6), (-1e6, 1e6), (-1e7, 1e7), (-1.5, 0.5), (-1.5, 0.5),
            (-1.5, 0.5)]),
    (_dc3, list(DATA_CONSTRAINED_BOUNDS)),
    (_dc4, [(-3, 8), (1e-3, 1e11), (0.05, 2.5), (1e-3, 1e9), (0.05, 2.5), (1e-5, 1e7),
            (-2.0, 1.5)]),
    (_dc5, [(1e-3, 1e10), (0.05, 2.0), (1e-3, 1e10), (0.05, 2.0), (-3, 10), (0.0, 1.0)]),
    (_dc6, [(-3, 10), (1e-3, 1e11), (0.05, 2.0), (1e-3, 1e12), (0.05, 2.0), (0, 1e4), (0, 2.0),
            (-1.0, 1.0)]),
    (_dc7, [(-3, 10), (1e-3, 1e9), (-2.0, 0.5), (1e-3, 1e9), (-2.0, 0.5), (-1e13, 1e13),
            (-2.5, 0.5)]),
    (_dc8, [(-3, 10), (-1e8, 1e8), (-1e8, 1e8), (-200, 200), (0.05, 2.0), (0.05, 2.0),
            (0.05, 5.0)]),
    (_dc9, [(1e-3, 1e7), (0.05, 2.0), (1e-3, 1e7), (0.05, 2.0), (0, 1e11), (0.05, 2.0),
            (-3, 10)]),
    (_dc10, [(-3, 8), (1e-3, 1e9), (1e-3, 1e9), (0.05, 2.0), (0.05, 2.0), (1e-3, 1e4),
             (0.1, 50.0)]),
]


def _columns(fn):
    def predict(T, X):
        return fn(T[:, :, None], *X.T)
    return predict


# ---- domain mixture: X = p (n, 5), five outputs; t_i (w, b) the i-th domain's rows -----------

def _others(i):
    return [j for j in range(K) if j != i]


def _lin(P, W):
    """Σ_j P[n, j] W[j, b] → (b, n)."""
    return np.einsum("nj,jb->bn", P, W)


def _dm1(t, P, i):
    return t[0][:, None] + t[1][:, None] * np.log(_pos(P[:, i])) + _lin(P[:, _others(i)], t[2:6])


def _dm2(t, P, i):
    A, e, a = (v[:, None] for v in t[:3])
    inter = np.clip(_lin(P[:, _others(i)], t[3:7]), -20, 20)
    return A * _pos(P[:, i] + e) ** (-a) * np.exp(inter)


def _dm3(t, P, i):
    return (t[0][:, None] + t[1][:, None] * _pos(P[:, i]) ** t[2][:, None]
            + _lin(P[:, _others(i)], t[3:7]))


def _dm6(t, P, i):
    C, A, a = (v[:, None] for v in t[:3])
    eff = _pos(P[:, i] + _lin(P[:, _others(i)], t[3:7]))
    return C + A * eff ** (-a)


def _dm7(t, P, i):
    a, b, c = (v[:, None] for v in t[:3])
    others = _others(i)
    logs = np.log(_pos(P[:, others])).sum(axis=1)
    return (a + b * P[:, i] + c * np.log(_pos(P[:, i])) + _lin(P[:, others], t[3:7])
            + t[7][:, None] * logs)


def _dm8(t, P, i):
    return t[0][:, None] - t[1][:, None] * _pos(P[:, i]) ** t[2][:, None]


def _dm9(t, P, i):
    lp = np.log(_pos(P[:, i]))
    return t[0][:, None] + t[1][:, None] * lp + t[2][:, None] * lp**2


def _dm10(t, P, i):
    return t[0][:, None] + t[1][:, None] / _pos(P[:, i] + t[2][:, None])


def _per_domain(width, one):
    """A 5-output law from a per-domain function ``one(t_i, P, i)`` of ``width`` rows each."""

    def predict(T, P):
        return np.stack([one(T[i * width:(i + 1) * width], P, i) for i in range(K)], axis=2)

    return predict


def _shared_powers(exp_of_sum: bool):
    """Forms 4 and 5: five shared exponents α_k, then per domain a bias and five weights on p_k^α_k."""

    def predict(T, P):
        powered = _pos(P)[None, :, :] ** T[:K].T[:, None, :]          # (b, n, K)
        rows = T[K:].reshape(K, K + 1, -1)                            # (domain, 1 + K, b)
        out = rows[:, 0].T[:, None, :] + np.einsum("bnk,ikb->bni", powered, rows[:, 1:])
        return np.exp(np.clip(out, -50, 50)) if exp_of_sum else out

    return predict


_W = (-10, 10)
_DM_FORMS = [
    (_per_domain(6, _dm1), [(-3, 6), (-10, 5), _W, _W, _W, _W] * K),
    (_per_domain(7, _dm2), ([(0, 10), (-0.03, 0.2), (0, 2)] + [(-5, 5)] * 4) * K),
    (_per_domain(7, _dm3), [(-3, 6), (-20, 20), (-2, 4), _W, _W, _W, _W] * K),
    (_shared_powers(True), [(-1, 3)] * K + [(-3, 3), _W, _W, _W, _W, _W] * K),
    (_shared_powers(False), [(-1, 3)] * K + ([(-3, 6)] + [(-25, 25)] * K) * K),
    (_per_domain(7, _dm6), ([(-3, 6), (0, 10), (0, 3)] + [(-5, 5)] * 4) * K),
    (_per_domain(8, _dm7), [(-5, 8), (-10, 15), (-5, 5), _W, _W, _W, _W, (-5, 5)] * K),
    (_per_domain(3, _dm8), [(0, 6), (0, 5), (0, 3)] * K),
    (_per_domain(3, _dm9), [(-3, 6), (-2, 1), (-1, 1)] * K),
    (_per_domain(3, _dm10), [(-3, 6), (-1, 1), (-0.03, 0.3)] * K),
]


def forms(task: str) -> list[ParametricLaw]:
    """The task's law forms: ``farseer``, ``data_constrained`` or ``domain_mixture``."""
    if task == "farseer":
        return [ParametricLaw("farseer", lambda T, X: farseer_loss(T[:, :, None], X[:, 0], X[:, 1]),
                              list(FARSEER_BOUNDS))]
    if task == "data_constrained":
        return [ParametricLaw(f"sl_{i + 1}", _columns(fn), b) for i, (fn, b) in enumerate(_DC_FORMS)]
    return [ParametricLaw(f"sl_{i + 1}", fn, b) for i, (fn, b) in enumerate(_DM_FORMS)]
