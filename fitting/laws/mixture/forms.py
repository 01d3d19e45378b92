"""The four mixture laws as designs for variable projection: pair i's final loss
L_i = A(θ; u, W) · c, with θ the parameters searched (exponents, transfer coefficients) and c
the linear ones (solved exactly), u the size N/N_ref (and D/D_ref where the token budget enters)
and W the runs' weights (one mixture per run, Σ_j w_j = 1).

``transfer`` (Fernandes et al. 2023 eq. 11 with eq. 13's effective fraction and a transfer
matrix τ), ``datamixing`` (Ye et al. 2024), ``additive`` and ``joint`` (Shukor et al. 2025): their
equations, what one model size leaves identifiable and the token-budget term are in
docs/reference/laws.md, "Mixture laws for K pairs"; their fitting is
:mod:`fitting.laws.mixture.laws`. Here: each form's design matrix, start grid, bounds and
Jacobian.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from fitting.core.base import FitError

__all__ = ["FORMS", "EPS", "TAU_BOUNDS", "BUDGET_FORMS", "BUDGET_RATIO", "LawSpec",
           "effective_weight", "other_pairs", "form_spec", "law_spec", "scaled_size", "budgets"]

#: the forms, in the order the comparison lists them
FORMS: tuple[str, ...] = ("transfer", "datamixing", "additive", "joint")
#: lower clip of the effective weight e_i (eq. 11 needs e_i > 0)
EPS = 1e-3
TAU_BOUNDS = (-0.5, 1.0)


@dataclass
class LawSpec:
    """One target's fit: θ names, bounds, start grids, design A(θ; u, W), linear names."""

    theta_names: list[str]
    lo: list[float]
    hi: list[float]
    grids: list[list[list[float]]]
    coef_names: list[str]
    design: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    jac: Callable[[np.ndarray, np.ndarray, np.ndarray], list[np.ndarray]]


def effective_weight(W: ArrayLike, i: int, tau_row: ArrayLike) -> np.ndarray:
    """e_i(w) = clip(w_i + Σ_{j≠i} τ_ij w_j, ε, 1) for each row of ``W``; ``tau_row`` holds τ_ij
    for every j (τ_ii ignored)."""
    W = np.atleast_2d(np.asarray(W, dtype=np.float64))
    t = np.asarray(tau_row, dtype=np.float64).copy()
    t[i] = 1.0
    return np.clip(W @ t, EPS, 1.0)


def other_pairs(i: int, k: int) -> np.ndarray:
    """The indices j ≠ i of ``k`` pairs (the sources of target i, in order)."""
    return np.array([j for j in range(k) if j != i], dtype=int)


def form_spec(form: str, i: int, k: int, sized: bool) -> LawSpec:
    """Target ``i``'s design of ``form`` (module docstring) among ``k`` pairs, with N in it when
    ``sized`` (several fitted sizes), its Jacobian, bounds and start grids."""
    oth = other_pairs(i, k)
    if form == "transfer":
        def design(th, u, W):
            e = np.clip(W[:, i] + W[:, oth] @ th[1:], EPS, 1.0)
            return np.column_stack([np.power(e * u, -th[0]), np.ones_like(u)])

        def jac(th, u, W):  # ∂A/∂α, ∂A/∂τ_j (0 where e is clipped)
            raw = W[:, i] + W[:, oth] @ th[1:]
            e = np.clip(raw, EPS, 1.0)
            a0 = np.power(e * u, -th[0])
            z = np.zeros_like(a0)
            inside = (raw > EPS) & (raw < 1.0)
            out = [np.column_stack([-np.log(e * u) * a0, z])]
            for j in oth:
                out.append(np.column_stack([np.where(inside, -th[0] * a0 / e * W[:, j], 0.0), z]))
            return out
        return LawSpec(["alpha"] + [f"tau{j}" for j in oth], [1e-4] + [TAU_BOUNDS[0]] * (k - 1),
                     [5.0] + [TAU_BOUNDS[1]] * (k - 1),
                     [[list(np.geomspace(0.05, 1.5, 6))] + [[t0]] * (k - 1) for t0 in (0.0, 0.3)],
                     ["beta_u", "l_inf"], design, jac)
    if form == "datamixing":
        def design(th, u, W):
            return np.column_stack([np.ones(len(W)), np.exp(W[:, oth] @ th)])

        def jac(th, u, W):
            a1 = np.exp(W[:, oth] @ th)
            return [np.column_stack([np.zeros(len(W)), W[:, j] * a1]) for j in oth]
        return LawSpec([f"t{j}" for j in oth], [-20.0] * (k - 1), [20.0] * (k - 1),
                     [[[t0]] * (k - 1) for t0 in (-1.0, 0.0, 1.0, 3.0)], ["c", "k"], design, jac)

    logs: dict = {}  # log w of the last weight matrix seen (one fit calls with the same W)

    def powers(th, W):
        """w^γ and w^γ log w (0 where w = 0)."""
        if logs.get("W") is not W:
            logs["W"], logs["pos"] = W, W > 0
            logs["log"] = np.log(np.where(logs["pos"], W, 1.0))
        wg = np.where(logs["pos"], np.exp(th[1] * logs["log"]), 0.0)
        return wg, wg * logs["log"]

    def denom(th, W):
        wg, _ = powers(th, W)
        return np.maximum(wg[:, i] + wg[:, oth] @ th[2:2 + len(oth)], 1e-12)

    def inv_jac(th, W):
        """∂(1/D)/∂γ and ∂(1/D)/∂c_j."""
        wg, lg = powers(th, W)
        c = th[2:2 + len(oth)]
        d = np.maximum(wg[:, i] + wg[:, oth] @ c, 1e-12)
        dg = -(lg[:, i] + lg[:, oth] @ c) / d**2
        return dg, [-wg[:, j] / d**2 for j in oth]

    names = ["alpha", "gamma"] + [f"c{j}" for j in oth]
    lo, hi = [1e-4, 0.02] + [1e-6] * (k - 1), [5.0, 3.0] + [1e3] * (k - 1)
    # C_ij below 1 (the pair's own data helps most) and above 1 (others' data helps more)
    grids = [[[0.1, 0.4] if sized else [0.3], [0.3, 0.7]] + [[c0]] * (k - 1) for c0 in (0.2, 2.0)]
    if form == "additive":
        def design(th, u, W):
            cols = [np.ones(len(W)), 1.0 / denom(th, W)]
            return np.column_stack(cols + ([np.power(u, -th[0])] if sized else []))

        def jac(th, u, W):
            z = np.zeros(len(W))
            dg, dc = inv_jac(th, W)
            da = [-np.log(u) * np.power(u, -th[0])] if sized else []
            out = [np.column_stack([z, z] + da)]
            out += [np.column_stack([z, d] + ([z] if sized else [])) for d in [dg] + dc]
            return out
        return LawSpec(names, lo, hi, grids, ["E", "s"] + (["A_u"] if sized else []), design, jac)
    if form == "joint":
        def design(th, u, W):
            return np.column_stack([np.ones(len(W)), 1.0 / denom(th, W),
                                    W * np.power(u, -th[0])[:, None]])

        def jac(th, u, W):
            z = np.zeros(len(W))
            zk = np.zeros_like(W)
            dg, dc = inv_jac(th, W)
            da = W * (-np.log(u) * np.power(u, -th[0]))[:, None]
            out = [np.column_stack([z, z, da])]
            out += [np.column_stack([z, d, zk]) for d in [dg] + dc]
            return out
        return LawSpec(names, lo, hi, grids, ["E", "s"] + [f"a_u{j}" for j in range(k)], design,
                     jac)
    raise FitError(f"unknown mixture law form {form!r}; expected one of {FORMS}")


#: the forms that take the token budget D (Shukor et al. 2025's B_i / D^β_i term)
BUDGET_FORMS: tuple[str, ...] = ("additive", "joint")
#: the budgets must span this ratio for D to enter a law
BUDGET_RATIO = 1.5


def _with_budget(spec: LawSpec) -> LawSpec:
    """``spec`` plus Shukor et al.'s term B_i (D/D_ref)^−β_i: one more θ (β_i, last) and one more
    linear coefficient (B_i, last); ``u`` is then (R, 2): N/N_ref and D/D_ref per run."""
    p = len(spec.theta_names)

    def design(th, u, W):
        return np.column_stack([spec.design(th[:p], u[:, 0], W), np.power(u[:, 1], -th[p])])

    def jac(th, u, W):
        z = np.zeros((len(W), 1))
        out = [np.column_stack([d, z]) for d in spec.jac(th[:p], u[:, 0], W)]
        db = np.zeros((len(W), len(spec.coef_names) + 1))
        db[:, -1] = -np.log(u[:, 1]) * np.power(u[:, 1], -th[p])
        return out + [db]
    return LawSpec(spec.theta_names + ["beta_d"], list(spec.lo) + [1e-3], list(spec.hi) + [3.0],
                 [g + [[0.3]] for g in spec.grids], spec.coef_names + ["B_d"], design, jac)


def law_spec(form: str, i: int, k: int, sized: bool, budgeted: bool) -> LawSpec:
    """:func:`form_spec`, with the D term (:func:`_with_budget`) when ``budgeted``."""
    spec = form_spec(form, i, k, sized)
    return _with_budget(spec) if budgeted and form in BUDGET_FORMS else spec


def scaled_size(n: np.ndarray, d: np.ndarray | None, n_ref: float, d_ref: float | None,
                sized: bool) -> np.ndarray:
    """The law's size argument u: N/N_ref (ones at one size), with a D/D_ref column when the
    law takes the token budget."""
    u = n / n_ref if sized else np.ones(len(n))
    return u if d_ref is None else np.column_stack([u, d / d_ref])


def budgets(d: ArrayLike | None, rows: int) -> tuple[np.ndarray | None, float | None]:
    """The runs' token budgets and their reference (geometric mean) when they are all known,
    positive and the largest is at least :data:`BUDGET_RATIO` times the smallest; else
    (None, None): D is then a constant of the laws (runs of one study differ in token counts
    by a few per cent at most, which no D term can resolve)."""
    if d is None:
        return None, None
    d = np.broadcast_to(np.asarray(d, dtype=np.float64), (rows,))
    if not np.all(np.isfinite(d) & (d > 0)) or np.ptp(np.log(d)) < np.log(BUDGET_RATIO):
        return None, None
    return d, float(np.exp(np.mean(np.log(d))))
