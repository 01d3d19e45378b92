"""L(N, D) across mixture weights: the Chinchilla form with eq. 7's sharing, fitted per pair on
cooled-down budgets (the converged loss of compute-limited runs).

    L_i(N, D; p) = E_i + A_{p,i} · N^(−α_i) + B_{p,i} · D^(−β_i)

(Caillaut et al. 2024 eq. 2 with Fernandes et al. 2023 eq. 7's sharing; E_i is the pair's L∞).
:func:`fit_joint_chinchilla` fits it by variable projection with perturbation uncertainty,
:func:`leave_largest_out` backtests it, :func:`select_form` chooses the form (this one or Kaplan's,
:mod:`fitting.laws.budget.kaplan_nd`) and the budgets per pair, :func:`e_bound` says when E is a
bound. The effective shares f_i(p), g_i(p), the interpolation to unfitted weights, the
convergence rules and the predicted budgets: docs/reference/laws.md, "L(N, D) across mixture
weights".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy.optimize import OptimizeResult

from fitting.core.base import FitError, FitResult, fitted_pair, register_law
from fitting.core.engine import (
    VarproModel,
    VarproOptions,
    converged,
    convergence_warning,
    goodness_of_fit,
    varpro_fit,
)
from fitting.core.options import BacktestOptions, FitOptions, UncertaintyOptions
from fitting.core.seed_noise import SeedNoise, few_seeds_verdict, judging_multiple
from fitting.core.uncertainty import (
    pair_band,
    perturbation_samples,
    summarize_samples,
)
from fitting.data.tables import check_finite_positive, check_weights, require_columns
from fitting.laws.budget.kaplan_nd import KAPLAN_EXPONENT_BOUNDS, fit_pair_kaplan, predict_kaplan

__all__ = ["JointChinchillaFit", "fit_joint_chinchilla", "leave_largest_out", "coef_key",
           "select_form", "e_bound", "EXPONENT_BOUNDS", "FORMS", "MIN_SELECTION_BUDGETS",
           "NOISE_GIVEN", "NO_NOISE_GIVEN", "budget_rank"]

#: the forms of L(N, D): "additive" (this module's docstring) and "kaplan"
#: (:mod:`fitting.laws.budget.kaplan_nd`: E + [(A/N)^(α/β) + B/D]^β)
FORMS = ("additive", "kaplan")
#: cooled-down budgets per run that a candidate of :func:`select_form` keeps (the last one is
#: predicted from the others, which need two for β)
MIN_SELECTION_BUDGETS = 3

#: bounds of α and β
EXPONENT_BOUNDS = (0.01, 4.0)
_EXPONENT_GRID = np.geomspace(0.05, 2.0, 9)
_SAME = 1e-6


def coef_key(name: str, pair: str, p: float | None = None) -> str:
    """Parameter name: ``E[en-de]``, ``alpha[en-de]``, ``A[en-de,p=0.5]``."""
    return f"{name}[{pair}]" if p is None else f"{name}[{pair},p={float(p):g}]"


@register_law("chinchilla_joint")
@dataclass
class JointChinchillaFit(FitResult):
    """L_i(N, D; p) per pair in the form ``meta["form"][pair]`` says: additive, E_i + A_{p,i}
    N^(−α_i) + B_{p,i} D^(−β_i) (module docstring), or Kaplan's (:mod:`fitting.laws.budget.kaplan_nd`).

    Params ``E[pair]``, ``alpha[pair]``, ``beta[pair]``, ``A[pair,p=…]``, ``B[pair,p=…]``;
    ``backtest[pair]``: :func:`leave_largest_out`."""

    pairs: list[str] | None = None
    weights: dict[str, list[float]] | None = None
    samples: dict[str, list[float]] | None = None
    backtest: dict[str, dict[str, Any]] | None = None
    n_range: tuple[float, float] | None = None
    d_range: tuple[float, float] | None = None

    @classmethod
    def _decode_extra(cls, name: str, value):
        if name in ("n_range", "d_range") and value is not None:
            return (float(value[0]), float(value[1]))
        return value

    def form(self, pair: str) -> str:
        """The form of ``pair``'s law (:data:`FORMS`)."""
        return (self.meta.get("form") or {}).get(self._pair(pair), "additive")

    def l_inf(self, pair: str) -> float:
        """L∞ of ``pair``: the limit of L(N, D) as N, D → ∞, E_i."""
        return float(self.params[coef_key("E", self._pair(pair))])

    def e_is_bound(self, pair: str) -> bool | None:
        """Whether ``pair``'s E is a bound, not an estimate (:func:`e_bound`); None for a fit
        stored before ``meta["E_is_bound"]`` existed (it cannot tell)."""
        flags = self.meta.get("E_is_bound")
        return None if flags is None else bool(flags.get(self._pair(pair)))

    def fraction(self, p: ArrayLike, pair: str, which: str = "A",
                 params: Mapping[str, float] | None = None) -> np.ndarray:
        """The effective share of the parameters (``which="A"``: f_i(p)) or of the tokens
        (``"B"``: g_i(p)) at weights ``p`` (docs/reference/laws.md); FitError above the largest
        fitted weight."""
        pair = self._pair(pair)
        q = self.params if params is None else params
        ws = sorted((self.weights or {}).get(pair, []))
        expo = self._share_exponent(q, which, pair)
        ref = q[coef_key(which, pair, ws[-1])]
        with np.errstate(divide="ignore"):
            f = [(ref / q[coef_key(which, pair, w)]) ** expo for w in ws]
        pa = np.atleast_1d(np.asarray(p, dtype=np.float64))
        if np.any(pa > ws[-1] + _SAME) or np.any(pa <= 0):
            raise FitError(f"pair {pair!r}: weights {pa.tolist()} outside (0, {ws[-1]:g}], the "
                           f"fitted weights' range {ws}", column="weight")
        return np.interp(pa, [0.0, *ws], [0.0, *f])

    def _coef(self, q: Mapping[str, float], which: str, pair: str, p: float) -> float:
        key = coef_key(which, pair, p)
        for w in (self.weights or {}).get(pair, []):
            if abs(w - p) < _SAME:
                return q[coef_key(which, pair, w)]
        if key in q:
            return q[key]
        ws = (self.weights or {}).get(pair, [])
        f = float(self.fraction(p, pair, which, q)[0])
        return q[coef_key(which, pair, max(ws))] * f ** (-1.0 / self._share_exponent(q, which,
                                                                                    pair))

    def _share_exponent(self, q: Mapping[str, float], which: str, pair: str) -> float:
        """f = (ref/coef)^this: 1/α (1/β) in the additive form, 1 in Kaplan's (scales in N, D)."""
        if self.form(pair) == "kaplan":
            return 1.0
        return 1.0 / q[coef_key("alpha" if which == "A" else "beta", pair)]

    def _predict(self, q: Mapping[str, float], n, d, p, pair: str) -> np.ndarray:
        n, d = np.broadcast_arrays(np.asarray(n, dtype=np.float64),
                                   np.asarray(d, dtype=np.float64))
        pa = np.broadcast_to(np.asarray(p, dtype=np.float64), n.shape)
        out = np.empty(n.shape)
        e, al, be = (q[coef_key(k, pair)] for k in ("E", "alpha", "beta"))
        for pv in np.unique(pa):
            m = pa == pv
            a, b = self._coef(q, "A", pair, float(pv)), self._coef(q, "B", pair, float(pv))
            out[m] = _law(self.form(pair), e, al, be, a, b, n[m], d[m])
        return out

    def predict(self, n: ArrayLike, d: ArrayLike, p: ArrayLike,  # type: ignore[override]
                pair: str | None = None) -> np.ndarray:
        """L_i(N, D; p) at model size(s) ``n``, training tokens ``d`` and weight(s) ``p``."""
        return self._predict(self.params, n, d, p, self._pair(pair))

    def band(self, n: ArrayLike, d: ArrayLike, p: ArrayLike, pair: str | None = None,
             level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Percentile band of :meth:`predict` over ``pair``'s own perturbation refits
        (:func:`fitting.core.uncertainty.pair_samples`: pairs lose different numbers of refits)."""
        pair = self._pair(pair)
        return pair_band(lambda q: self._predict(q, n, d, p, pair), self.samples, pair, level,
                         estimate=self.params)

    def _pair(self, pair: str | None) -> str:
        return fitted_pair(self.pairs, pair)


def _prepare(df: pd.DataFrame, source: str | None) -> pd.DataFrame:
    loss_col = "loss" if "loss" in df.columns else "value"
    d_col = "d" if "d" in df.columns else "tokens"
    require_columns(df, ["n", d_col, "weight", loss_col], source)
    out = pd.DataFrame(index=df.index)
    out["pair"] = df["pair"].astype(str) if "pair" in df.columns else "all"
    out["weight"] = check_weights(df, "weight", source)
    out["n"] = check_finite_positive(df, "n", source)
    out["d"] = check_finite_positive(df, d_col, source)
    out["loss"] = check_finite_positive(df, loss_col, source)
    out["predicted"] = (df["predicted"].fillna(False).astype(bool) if "predicted" in df.columns
                        else False)
    return out


def _law(form: str, e, alpha, beta, a, b, n, d) -> np.ndarray:
    """L(N, D) of one weight in ``form`` (:data:`FORMS`)."""
    if form == "kaplan":
        return predict_kaplan(e, alpha, beta, a, b, n, d)
    return e + a * np.asarray(n, dtype=np.float64) ** -alpha + b * np.asarray(
        d, dtype=np.float64) ** -beta


def _fit_pair(n, d, p, y, *, loss: str, f_scale, theta0=None, form: str = "additive",
              status: dict | None = None, refit: bool = False) -> tuple[dict, float]:
    """One pair's parameters in ``form`` and the f_scale used. ``status`` (a dict) is filled
    with ``converged`` (:func:`fitting.core.engine.converged` of the last solve), ``nfev`` and
    ``message``; a refit (``theta0`` given, or ``refit``: a backtest's) that did not converge
    raises FitError, so that it counts as failed and is never used as a number."""
    st: dict = {} if status is None else status
    if form == "kaplan":
        out = fit_pair_kaplan(n, d, p, y, loss=loss, f_scale=f_scale, theta0=theta0, status=st)
    elif form == "additive":
        a0 = [theta0["alpha"], theta0["beta"]] if isinstance(theta0, dict) else theta0
        out = _fit_pair_additive(n, d, p, y, loss=loss, f_scale=f_scale, theta0=a0, status=st)
    else:
        raise FitError(f"L(N, D) form: expected one of {FORMS} or 'auto', got {form!r}")
    if refit and not st["converged"]:
        raise FitError(f"L(N, D) refit ({form} form) did not converge after {st['nfev']} "
                       f"evaluations: {st['message']}")
    return out


def _fit_pair_additive(n, d, p, y, *, loss: str, f_scale, theta0=None,
                       status: dict | None = None) -> tuple[dict, float]:
    """Variable projection for one pair: θ = (α, β); E, A_p, B_p linear, non-negative.
    Returns the pair's parameters (without the pair name: E, alpha, beta, A[w], B[w]) and the
    f_scale used; ``status`` as :func:`_fit_pair`'s."""
    ws = np.unique(p)
    n_ref, d_ref = float(np.exp(np.mean(np.log(n)))), float(np.exp(np.mean(np.log(d))))
    u, v = n / n_ref, d / d_ref
    lu, lv = np.log(u), np.log(v)
    onehot = (p[:, None] == ws[None, :]).astype(np.float64)

    def design(theta):
        return np.column_stack([np.ones_like(u), onehot * (u ** -theta[0])[:, None],
                                onehot * (v ** -theta[1])[:, None]])

    def design_jac(theta):
        zero_w, zero_1 = np.zeros_like(onehot), np.zeros((len(u), 1))
        da = onehot * (-lu * u ** -theta[0])[:, None]
        db = onehot * (-lv * v ** -theta[1])[:, None]
        return [np.column_stack([zero_1, da, zero_w]), np.column_stack([zero_1, zero_w, db])]

    lo, hi = EXPONENT_BOUNDS
    model = VarproModel(design, theta_bounds=([lo, lo], [hi, hi]), coef_nonneg=True,
                        design_jac=design_jac)
    res = varpro_fit(model, y, theta_grid=[_EXPONENT_GRID, _EXPONENT_GRID], theta0=theta0,
                     sigma=y, options=VarproOptions(loss=loss, f_scale=f_scale))
    if status is not None:
        status.update(converged=converged(res), nfev=res.nfev, message=res.message)
    a, b = (float(t) for t in res.theta)
    k = ws.size
    out = {"E": float(res.coef[0]), "alpha": a, "beta": b}
    for j, w in enumerate(ws):
        out[("A", float(w))] = float(res.coef[1 + j] * n_ref ** a)
        out[("B", float(w))] = float(res.coef[1 + k + j] * d_ref ** b)
    return out, res.f_scale


def _named(raw: dict, pair: str) -> dict[str, float]:
    return {coef_key(k[0], pair, k[1]) if isinstance(k, tuple) else coef_key(k, pair): v
            for k, v in raw.items()}


def _predict_raw(raw: dict, n, d, p, form: str = "additive") -> np.ndarray:
    a = np.array([raw[("A", float(w))] for w in p])
    b = np.array([raw[("B", float(w))] for w in p])
    return _law(form, raw["E"], raw["alpha"], raw["beta"], a, b, n, d)


def leave_largest_out(n, d, p, y, *, loss: str = "soft_l1", f_scale: Any = "auto",
                      noise_rel: float | None = None, tolerance: float = 3.0,
                      form: str = "additive", graded: ArrayLike | None = None
                      ) -> dict[str, Any]:
    """Refit one pair's law without its largest model size and predict that size's points
    (Caillaut et al. §4.1). With ``form="auto"`` the form and the budgets are chosen by
    :func:`select_form` on the smaller sizes only, so the held-out size never influences the
    choice (choosing on all sizes and then backtesting would grade the choice on the points that
    made it); the held-out size's points at the chosen budgets are predicted.

    Returns ``held_out_n``, ``errors`` (relative, (pred − y)/y, per held point with its D and
    p), ``rmse_rel``, ``mean_rel``, ``max_abs_rel``, ``l_inf`` of the refit, ``form`` and
    ``budgets`` of the refit (``budgets``: None unless chosen), ``noise_rel`` and ``within``
    (rmse_rel ≤ tolerance × noise_rel; None without a noise level). A refit that did not
    converge (:func:`fitting.core.engine.converged`; with ``form="auto"`` the chosen candidate's
    fit) raises FitError: its last iterate is no prediction to grade. ``graded`` (a mask,
    default every point): the held-out size's points that may be graded — a predicted
    cooled-down budget (:mod:`fitting.report.predicted_budgets`) is fitted like the others but
    never graded; ``n_not_graded`` counts the held-out points it leaves out."""
    n, d, p, y = (np.asarray(x, dtype=np.float64) for x in (n, d, p, y))
    graded = np.ones(n.shape, bool) if graded is None else np.asarray(graded, bool)
    held = n == n.max()
    if np.unique(n[~held]).size < 3:
        raise FitError("leave-largest-out needs ≥ 4 model sizes (3 left to fit)", column="n")
    rest = ~held
    budgets = None
    if form == "auto":
        sel = select_form(n[rest], d[rest], p[rest], y[rest], loss=loss, f_scale=f_scale)
        form, raw, budgets = sel["form"], sel["raw"], int(sel["budgets"])
        if not sel["converged"]:
            raise FitError(f"L(N, D) backtest refit ({form} form, {budgets} budgets, chosen "
                           "without the largest size) did not converge: "
                           + sel["candidates"][sel["chosen"]]["message"])
        held = held & (budget_rank(d, p, n) < budgets)
    else:
        raw, _ = _fit_pair(n[rest], d[rest], p[rest], y[rest], loss=loss, f_scale=f_scale,
                           form=form, refit=True)
    n_not_graded = int((held & ~graded).sum())
    held = held & graded
    if not held.any():
        raise FitError("leave-largest-out: no trained point at the largest size to grade "
                       "(every one predicted)", column="predicted")
    keep = np.isin(p[held], np.unique(p[rest]))
    err = _predict_raw(raw, n[held][keep], d[held][keep], p[held][keep], form) \
        / y[held][keep] - 1.0
    rmse = float(np.sqrt(np.mean(err ** 2)))
    out: dict[str, Any] = {
        "held_out_n": float(n.max()), "rmse_rel": rmse, "mean_rel": float(np.mean(err)),
        "max_abs_rel": float(np.max(np.abs(err))), "l_inf": raw["E"], "form": form,
        "budgets": budgets, "n_not_graded": n_not_graded,
        "errors": [{"d": float(a), "p": float(b), "error": float(e)} for a, b, e in
                   zip(d[held][keep], p[held][keep], err, strict=True)],
        "noise_rel": noise_rel, "tolerance": tolerance,
        "within": None if noise_rel is None else bool(rmse <= tolerance * noise_rel)}
    return out


def budget_rank(d: ArrayLike, p: ArrayLike, n: ArrayLike) -> np.ndarray:
    """Each point's budget counted from its run's last (0 = the largest D of that weight and
    size, 1 the one before, …), from the points' D, weight p and size N."""
    d, p, n = (np.asarray(x, dtype=np.float64) for x in (d, p, n))
    rank = np.empty(d.size, dtype=np.int64)
    for key in set(zip(p.tolist(), n.tolist(), strict=True)):
        m = (p == key[0]) & (n == key[1])
        ds = np.unique(d[m])[::-1]
        rank[m] = np.searchsorted(-ds, -d[m])
    return rank


def _rel_errors(train, target, n, d, p, y, *, form, loss, f_scale) -> np.ndarray:
    """Relative errors at ``target`` of the law refitted on ``train`` (FitError when that refit
    did not converge: its last iterate scores no candidate)."""
    raw, _ = _fit_pair(n[train], d[train], p[train], y[train], loss=loss, f_scale=f_scale,
                       form=form, refit=True)
    target = target & np.isin(p, np.unique(p[train]))
    return _predict_raw(raw, n[target], d[target], p[target], form) / y[target] - 1.0


def select_form(n, d, p, y, *, forms: tuple[str, ...] = FORMS, loss: str = "soft_l1",
                f_scale: Any = "auto", min_budgets: int = MIN_SELECTION_BUDGETS
                ) -> dict[str, Any]:
    """Choose one pair's form and how many of each run's last budgets to fit, by how well each
    candidate predicts points it did not see (the choice knows nothing of the true L∞).

    A candidate is a form of :data:`FORMS` fitted on each run's last k cooled-down budgets,
    k = all … ``min_budgets`` (the earliest budgets of short runs can lie in a phase of training
    no power law describes). Its score is the relative RMSE over two sets of predictions made
    without the predicted points, both on the runs' last budget so that every candidate answers
    the same questions: (a) each run's last budget from the earlier budgets of all runs
    (extrapolation in D) and (b) the largest size's last budget from the smaller sizes (extrapolation in N, when
    there are ≥ 4 sizes). A candidate one of whose prediction refits did not converge
    (:func:`fitting.core.engine.converged`) is not scored: its error says so. The lowest score
    wins. Returns ``form``, ``budgets`` (k), ``keep`` (the
    points of the chosen k), ``raw`` and ``f_scale`` (the chosen candidate's fit on them) and
    ``candidates`` (per candidate: form, budgets, score, rmse_d, rmse_n, E of the fit on all its
    points, or the error that stopped it; and whether that fit ``converged``, with its optimiser's
    ``nfev`` and ``message``); ``converged``: whether the chosen candidate's fit converged
    (:func:`fitting.core.engine.converged`)."""
    n, d, p, y = (np.asarray(x, dtype=np.float64) for x in (n, d, p, y))
    rank = budget_rank(d, p, n)
    k_max = int(rank.max()) + 1
    if k_max < min_budgets:
        raise FitError(f"choosing the L(N, D) form needs ≥ {min_budgets} cooled-down budgets per "
                       f"run (the last predicted from ≥ 2 earlier ones); the runs have {k_max}",
                       column="tokens")
    sizes = np.unique(n)
    cands: list[dict[str, Any]] = []
    fits: dict[int, tuple[dict, float]] = {}
    for form in forms:
        for k in range(k_max, min_budgets - 1, -1):
            keep = rank < k
            last = keep & (rank == 0)
            row: dict[str, Any] = {"form": form, "budgets": k}
            try:
                err_d = _rel_errors(keep & (rank > 0), last, n, d, p, y, form=form, loss=loss,
                                    f_scale=f_scale)
                err_n = np.empty(0)
                if sizes.size >= 4:
                    big = n == sizes[-1]
                    err_n = _rel_errors(keep & ~big, last & big, n, d, p, y, form=form,
                                        loss=loss, f_scale=f_scale)
                st: dict = {}
                raw, fs = _fit_pair(n[keep], d[keep], p[keep], y[keep], loss=loss,
                                    f_scale=f_scale, form=form, status=st)
            except FitError as e:
                row.update(score=None, error=str(e))
                cands.append(row)
                continue
            if err_d.size == 0:
                row.update(score=None, error="no run's last budget to predict")
                cands.append(row)
                continue
            score = float(np.sqrt(np.mean(np.concatenate([err_d, err_n]) ** 2)))
            row.update(score=score if np.isfinite(score) else None,
                       rmse_d=float(np.sqrt(np.mean(err_d ** 2))),
                       rmse_n=float(np.sqrt(np.mean(err_n ** 2))) if err_n.size else None,
                       E=raw["E"], converged=bool(st["converged"]), nfev=int(st["nfev"]),
                       message=str(st["message"]))
            fits[len(cands)] = (raw, fs)
            cands.append(row)
    scored = [i for i, c in enumerate(cands) if c["score"] is not None]
    if not scored:
        raise FitError("no L(N, D) form could be scored: "
                       + "; ".join(c.get("error", "") for c in cands), column="tokens")
    best = min(scored, key=lambda i: cands[i]["score"])
    chosen = cands[best]
    return {"form": chosen["form"], "budgets": chosen["budgets"], "chosen": best,
            "keep": rank < chosen["budgets"], "raw": fits[best][0], "f_scale": fits[best][1],
            "converged": chosen["converged"], "candidates": cands}


def e_bound(e: float, y: ArrayLike) -> str | None:
    """Whether a fitted E is a bound rather than an estimate: ``"upper"`` when it sits at or
    above the lowest loss fitted (the fitted budgets show no decrease left to extrapolate, in
    either form: Kaplan's bounds E there, the additive form can end there or above), ``"lower"``
    when it sits at 0 (the non-negativity bound; below 1e-9 of the lowest loss: a log-space fit
    reaches 0 only as e^−50), else None."""
    lowest = float(np.min(np.asarray(y, dtype=np.float64)))
    if e <= 1e-9 * lowest:
        return "lower"
    if e >= lowest * (1 - 1e-4):
        return "upper"
    return None


def _check_pair_points(pair: str, n, d, p, y) -> None:
    """FitError unless ``pair`` has ≥ 3 sizes, more points than parameters and ≥ 2 D per weight."""
    ws = np.unique(p)
    k = 3 + 2 * ws.size
    if np.unique(n).size < 3 or y.size < k + 1:
        raise FitError(f"L(N, D) pair {pair!r}: {k} free parameters, {y.size} points over "
                       f"{np.unique(n).size} sizes; need > {k} points and ≥ 3 sizes",
                       column="n")
    for w in ws:
        if np.unique(d[p == w]).size < 2:
            raise FitError(f"L(N, D) pair {pair!r}, weight {w:g}: one token budget D; "
                           "B and β need ≥ 2 (cool-down branches)", column="tokens")


def _bound_warnings(pair: str, raw: dict, form: str, y) -> tuple[str | None, list[str]]:
    """(:func:`e_bound` of the pair's E, the warnings on E and the exponents at their bounds)."""
    out = []
    bound = e_bound(raw["E"], y)
    if bound == "lower":
        out.append(f"pair {pair!r}: E = 0 at its bound: the data do not show where the loss "
                   "levels off, so L∞ is not estimated")
    elif bound == "upper":
        out.append(f"pair {pair!r}: E = {raw['E']:.4g} at or above the lowest loss measured "
                   f"({float(np.min(y)):.4g}): the fitted budgets show no decrease left to "
                   "extrapolate, so L∞ is bounded above by it, not estimated")
    bounds = KAPLAN_EXPONENT_BOUNDS if form == "kaplan" else EXPONENT_BOUNDS
    for name in ("alpha", "beta"):
        if min(abs(raw[name] - b) for b in bounds) < 1e-3:
            out.append(f"pair {pair!r}: {name} = {raw[name]:.3g} at its bound {bounds}")
    return bound, out


def _convergence_warning(pair: str, form: str, status: dict) -> str | None:
    """:func:`fitting.core.engine.convergence_warning` of a main fit from :func:`_fit_pair`'s
    ``status`` (its verdict, evaluations and message; the result object is not kept)."""
    result = OptimizeResult(success=status["converged"], nfev=status["nfev"],
                            message=status["message"])
    return convergence_warning(result, f"pair {pair!r} ({form} form)")


@dataclass(frozen=True)
class _PairOptions:
    """What :func:`fit_joint_chinchilla` hands each pair's fit: its arguments of those names."""

    fit: FitOptions
    uncertainty: UncertaintyOptions
    backtest: BacktestOptions | None
    noise_rel: Mapping[str, float | SeedNoise] | None
    form: str


def _fit_one(pair: str, sub: pd.DataFrame, o: _PairOptions) -> dict[str, Any]:
    """One pair of :func:`fit_joint_chinchilla` (``o``: its options): the pair's parameters,
    goodness, warnings, meta entries, samples and backtest; FitError when it cannot be fitted."""
    n, d, p, y = (sub[c].to_numpy(np.float64) for c in ("n", "d", "weight", "loss"))
    _check_pair_points(pair, n, d, p, y)
    is_pred = sub["predicted"].to_numpy(bool)
    all_points = (n, d, p, y, is_pred)
    out: dict[str, Any] = {"meta": {"predicted_points": int(is_pred.sum())}}
    if o.form == "auto":
        sel = select_form(n, d, p, y, loss=o.fit.robust_loss, f_scale=o.fit.f_scale)
        form, raw, fs = sel["form"], sel["raw"], sel["f_scale"]
        st = sel["candidates"][sel["chosen"]]
        n, d, p, y = (x[sel["keep"]] for x in (n, d, p, y))
        out["meta"]["selection"] = {k: v for k, v in sel.items()
                                    if k not in ("keep", "raw", "f_scale")}
    else:
        form, st = o.form, {}
        raw, fs = _fit_pair(n, d, p, y, loss=o.fit.robust_loss, f_scale=o.fit.f_scale, form=form,
                            status=st)
    k = 3 + 2 * np.unique(p).size
    pred = _predict_raw(raw, n, d, p, form)
    good = {f"{name}[{pair}]": val for name, val in goodness_of_fit(y, pred, k).items()}
    good[f"rmse_rel[{pair}]"] = float(np.sqrt(np.mean((pred / y - 1.0) ** 2)))
    bound, warnings = _bound_warnings(pair, raw, form, y)
    out["meta"]["converged"] = bool(st["converged"])
    if (w_conv := _convergence_warning(pair, form, st)):
        warnings.append(w_conv)
    out.update(raw=raw, form=form, f_scale=fs, weights=[float(w) for w in np.unique(p)],
               goodness=good, y=y, pred=pred, bound=bound, warnings=warnings)
    if o.uncertainty.method == "perturbation":

        def refit(y_new, n=n, d=d, p=p):
            return _named(_fit_pair(n, d, p, y_new, loss=o.fit.robust_loss, f_scale=fs,
                                    theta0=raw, form=form)[0], pair)

        s, failed = perturbation_samples(refit, y, n_refits=o.uncertainty.n_refits,
                                         sigma_rel=o.uncertainty.sigma_rel,
                                         seed=o.uncertainty.seed)
        out["meta"]["perturbation_failed"] = failed
        out["samples"] = {kk: v.tolist() for kk, v in s.items()}
    elif o.uncertainty.method not in (None, "none"):
        raise FitError("uncertainty: expected 'perturbation' or None, "
                       f"got {o.uncertainty.method!r}")
    if o.backtest is not None and np.unique(n).size >= 4:
        bt_points, bt_form = (all_points, "auto") if o.form == "auto" else (
            (n, d, p, y, is_pred), form)
        out["backtest"] = _pair_backtest(pair, bt_points, o, bt_form)
    return out


#: ``backtest[pair]["noise_source"]`` with the noise given / without
NOISE_GIVEN = "given (seed noise)"
NO_NOISE_GIVEN = "none: no seed noise given, not judged"


def _pair_backtest(pair: str, points, o: _PairOptions, form: str) -> dict[str, Any]:
    """:func:`leave_largest_out` of one pair, judged against the noise given for it (a seed sd
    of 0 included); without one, not judged (``within`` None): never against the fit's
    residual sd, which grows with the law's misfit and would pass the law that misses most.
    A :class:`~fitting.core.seed_noise.SeedNoise` given carries its seeds and dof
    (``noise_seeds``, ``noise_dof``) and is judged by the report's one rule: ``tolerance`` the
    backtest's multiple widened to Student's t on σ's dof (:func:`fitting.core.seed_noise.
    judging_multiple`, 4.85 on 2 dof), as the report's first section judges the same backtest;
    one on too few dof to judge leaves ``within`` None, its ``noise_source`` the verdict of
    information.
    With ``form="auto"`` on all the pair's points, so that the backtest chooses its form and
    budgets without the held-out size. A backtest that cannot be fitted returns
    ``{"error": …}``."""
    given = (o.noise_rel or {}).get(pair)
    noise = None if given is None else float(getattr(given, "sigma", given))
    tolerance = judging_multiple(getattr(given, "dof", None), o.backtest.tolerance)
    try:
        bt = leave_largest_out(*points[:4], loss=o.fit.robust_loss, f_scale=o.fit.f_scale,
                               noise_rel=noise, tolerance=tolerance, form=form,
                               graded=~points[4])
    except FitError as e:
        return {"error": str(e)}
    bt["noise_source"] = NO_NOISE_GIVEN if noise is None else NOISE_GIVEN
    if isinstance(given, SeedNoise):
        bt["noise_seeds"], bt["noise_dof"] = given.seeds, given.dof
        if not given.judges:
            bt["within"] = None
            bt["noise_source"] = few_seeds_verdict(given.seeds, given.dof)
    return bt


def fit_joint_chinchilla(
    df: pd.DataFrame,
    *,
    fit_options: FitOptions = FitOptions(),
    uncertainty: UncertaintyOptions = UncertaintyOptions(),
    backtest: BacktestOptions | None = BacktestOptions(),
    noise_rel: Mapping[str, float | SeedNoise] | None = None,
    form: str = "additive",
    skip_failed_pairs: bool = False,
    source: str | None = None,
) -> JointChinchillaFit:
    """Fit L_i(N, D; p) (module docstring) to columns ``pair``, ``weight``, ``n``, ``d`` (or
    ``tokens``: the training tokens of the run at that loss) and ``loss`` (or ``value``).

    ``form``: "additive" (this module), "kaplan" (:mod:`fitting.laws.budget.kaplan_nd`) or
    "auto": per pair, the form and the number of each run's last budgets that
    :func:`select_form` chooses by prediction of unseen points (``meta["form"]``,
    ``meta["selection"]``); the backtest then chooses again without the largest size.

    An optional bool column ``predicted`` marks cooled-down budgets predicted, not trained
    (:mod:`fitting.report.predicted_budgets`): fitted like the others, never graded by the
    backtest; ``meta["predicted_points"][pair]`` counts them.

    Rows with weight 0 (zero-shot) are left out (``meta["excluded_zero_weight"]``). Each pair
    needs ≥ 3 model sizes and ≥ 2 distinct D at every weight. ``fit_options`` and
    ``uncertainty`` (``method`` ``"perturbation"`` or ``None``) are
    :func:`fitting.laws.size.power.fit_power_law`'s; ``backtest``: its ``tolerance`` (``None``: no
    backtest; its ``noise_level`` must stay None, the noise being per pair). ``noise_rel[pair]``:
    the relative noise the backtest is judged against (e.g. the seed sd of the largest size over
    its loss; a :class:`~fitting.core.seed_noise.SeedNoise` judges only on enough dof);
    without it the backtest is not judged (``within`` None, ``noise_source``
    :data:`NO_NOISE_GIVEN`): the fit's residual sd includes the misfit the backtest exposes.

    ``meta["E_is_bound"][pair]``: whether E is a bound, not an estimate (:func:`e_bound`, either
    form); the pairs of an upper bound are listed in ``meta["e_at_lowest_loss"]``, those of a lower
    one in ``meta["e_at_zero"]``. ``meta["converged"][pair]``: whether the pair's main fit
    converged (:func:`fitting.core.engine.converged`; False: a warning too); a backtest that
    cannot be fitted, its refit not converged included, is in ``meta["backtest_failed"][pair]``
    with its reason. ``skip_failed_pairs``: a pair that cannot be fitted is left out
    with its reason in ``meta["failed_pairs"]`` instead of failing the fit (FitError when no
    pair is left).
    """
    pts = _prepare(df, source)
    zero = pts["weight"] <= 0
    pts = pts[~zero]
    if pts.empty:
        raise FitError("no rows with a positive weight to fit L(N, D) to", column="weight")
    if form not in (*FORMS, "auto"):
        raise FitError(f"L(N, D) form: expected one of {FORMS} or 'auto', got {form!r}")
    if backtest is not None and backtest.noise_level is not None:
        raise FitError("L(N, D): the backtest's noise is relative and per pair: give noise_rel, "
                       "not BacktestOptions.noise_level")
    opts = _PairOptions(fit_options, uncertainty, backtest, noise_rel, form)
    meta: dict[str, Any] = {
        "equation": "Caillaut et al. 2024 eq. 2 (form additive) or Kaplan et al. 2020 eq. 1.5 "
                    "with an irreducible loss (form kaplan), per pair as meta['form'] says, "
                    "with Fernandes et al. 2023 eq. 7's sharing",
        "robust_loss": fit_options.robust_loss, "uncertainty": uncertainty.method,
        "sigma_rel": uncertainty.sigma_rel, "n_refits": uncertainty.n_refits,
        "seed": uncertainty.seed, "excluded_zero_weight": int(zero.sum()),
        "f_scale": {}, "form": {}, "E_is_bound": {}}
    fits: dict[str, dict[str, Any]] = {}
    for pair in sorted(pts["pair"].unique()):
        try:
            fits[pair] = _fit_one(pair, pts[pts["pair"] == pair], opts)
        except FitError as e:
            if not skip_failed_pairs:
                raise
            meta.setdefault("failed_pairs", {})[pair] = str(e)
    if not fits:
        raise FitError("no pair could be fitted: " + "; ".join(
            f"{p}: {why}" for p, why in meta["failed_pairs"].items()))
    return _assemble(fits, meta, pts, uncertainty.level)


def _assemble(fits: dict[str, dict[str, Any]], meta: dict[str, Any], pts: pd.DataFrame,
              level: float) -> JointChinchillaFit:
    """The :class:`JointChinchillaFit` of the pairs fitted by :func:`_fit_one`."""
    params: dict[str, float] = {}
    good: dict[str, float] = {}
    samples: dict[str, list[float]] = {}
    warnings: list[str] = []
    bts: dict[str, dict[str, Any]] = {}
    for pair, f in fits.items():
        params.update(_named(f["raw"], pair))
        good.update(f["goodness"])
        samples.update(f.get("samples") or {})
        warnings += f["warnings"]
        meta["f_scale"][pair], meta["form"][pair] = f["f_scale"], f["form"]
        meta["E_is_bound"][pair] = f["bound"] is not None
        if f["bound"] is not None:
            key = "e_at_lowest_loss" if f["bound"] == "upper" else "e_at_zero"
            meta.setdefault(key, []).append(pair)
        for key, value in f["meta"].items():
            meta.setdefault(key, {})[pair] = value
        bt = f.get("backtest")
        if bt and "error" in bt:
            meta.setdefault("backtest_failed", {})[pair] = bt["error"]
        elif bt:
            bts[pair] = bt
    y_all = np.concatenate([f["y"] for f in fits.values()])
    good.update(goodness_of_fit(y_all, np.concatenate([f["pred"] for f in fits.values()]),
                                len(params)))
    stderr = intervals = None
    if samples:
        stderr, intervals = summarize_samples({k: np.array(v) for k, v in samples.items()},
                                              level, estimate=params)
    fitted = pts[pts["pair"].isin(list(fits))]
    return JointChinchillaFit(
        law="chinchilla_joint", params=params, stderr=stderr, intervals=intervals,
        goodness=good, n_points=int(y_all.size), warnings=warnings, meta=meta,
        pairs=sorted(fits), weights={p: f["weights"] for p, f in fits.items()},
        samples=samples or None, backtest=bts or None,
        n_range=(float(fitted["n"].min()), float(fitted["n"].max())),
        d_range=(float(fitted["d"].min()), float(fitted["d"].max())))
