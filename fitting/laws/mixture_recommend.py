"""Recommended weights: the mixture minimising the preference-weighted mean predicted loss of a
fitted mixture law at a target size, under per-pair maximum weights and maximum losses, with
the baselines (:mod:`fitting.laws.mixture_baselines`) at the same size."""

from __future__ import annotations

import numpy as np

from fitting.core.base import FitError
from fitting.data.sampling import epoch_cap_weights
from fitting.laws.mixture_baselines import baseline_mixtures, constraint_violations
from fitting.laws.mixture_laws import MixtureLawFit

__all__ = ["recommend_mixture"]


def _project(v: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Euclidean projection onto {0 ≤ w ≤ cap, Σ w = 1} (bisection on the shift)."""
    lo, hi = np.min(v - cap) - 1.0, np.max(v) + 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if np.clip(v - mid, 0.0, cap).sum() > 1.0:
            lo = mid
        else:
            hi = mid
    return np.clip(v - 0.5 * (lo + hi), 0.0, cap)


def _vec(d: dict | None, pairs: list[str], default: float, what: str) -> np.ndarray:
    d = d or {}
    unknown = [p for p in d if p not in pairs]
    if unknown:
        raise FitError(f"{what}: unknown pair(s) {unknown}; pairs: {pairs}", column="pair")
    return np.array([float(d.get(p, default)) for p in pairs])


def recommend_mixture(fit: MixtureLawFit, target_size: float, *,
                      max_weights: dict[str, float] | None = None,
                      max_loss: dict[str, float] | None = None,
                      preferences: dict[str, float] | None = None,
                      data_size: dict[str, float] | None = None,
                      budget_examples: float | None = None, epoch_cap: float | None = None,
                      n_starts: int = 8, seed: int = 0) -> dict:
    """Weights on the simplex minimising Σ_i π_i L_i(N, w) / Σ_i π_i of the law ``fit`` at
    N = ``target_size`` subject to w_i ≤ max weight (caller's, and epoch_cap · data_size_i /
    budget when all three are known) and L_i(N, w) ≤ max loss; SLSQP from ``n_starts`` starts
    (uniform and seeded Dirichlet draws, projected on the feasible box). Baselines at the same N:
    uniform, temperature T ∈ {1, 5, 100} (need data sizes) and UniMax (data sizes, budget and
    epoch cap)."""
    from scipy.optimize import minimize

    pairs = fit.pairs or []
    k = len(pairs)
    if not fit.can_predict(target_size):
        raise FitError(f"the {fit.form} law was fitted at sizes {fit.sizes} and cannot predict "
                       f"at N = {target_size:g}", column="n")
    cap = np.minimum(_vec(max_weights, pairs, 1.0, "max_weights"), 1.0)
    ds = {p: v for p, v in (data_size or {}).items() if p in pairs}
    cap_source = "caller" if max_weights else "none"
    if epoch_cap and budget_examples and len(ds) == k:
        ecap = epoch_cap_weights([ds[p] for p in pairs], budget_examples, epoch_cap)
        cap = np.minimum(cap, ecap)
        cap_source = "caller and epoch cap" if max_weights else "epoch cap"
    if cap.sum() < 1.0 - 1e-9:
        raise FitError(f"the maximum weights sum to {cap.sum():.4g} < 1: no mixture meets them",
                       column="weight")
    lmax = _vec(max_loss, pairs, np.inf, "max_loss")
    pref = _vec(preferences, pairs, 1.0, "preferences")
    if np.any(pref < 0) or pref.sum() <= 0:
        raise FitError("preferences: expected non-negative numbers, not all zero")
    pi = pref / pref.sum()

    def losses(w):
        return fit.predict(np.array([target_size]), w[None, :])[0]

    def objective(w):
        return float(pi @ losses(w))

    cons = [{"type": "eq", "fun": lambda w: np.sum(w) - 1.0}]
    fin = np.isfinite(lmax)
    if fin.any():
        cons.append({"type": "ineq", "fun": lambda w: (lmax - losses(w))[fin]})
    rng = np.random.default_rng(seed)
    starts = [np.full(k, 1.0 / k)] + list(rng.dirichlet(np.ones(k), max(0, n_starts - 1)))
    best, best_key = None, (np.inf, np.inf)
    for s in starts:
        w0 = _project(np.asarray(s), cap)
        with np.errstate(all="ignore"):
            res = minimize(objective, w0, method="SLSQP", bounds=list(zip(np.zeros(k), cap,
                                                                          strict=True)),
                           constraints=cons, options={"maxiter": 300, "ftol": 1e-10})
        w = _project(np.clip(res.x, 0.0, None), cap)
        pred = losses(w)
        viol = float(np.sum(np.clip(pred - lmax, 0.0, None)[fin]))
        key = (round(viol, 9), objective(w))
        if np.all(np.isfinite(pred)) and key < best_key:
            best, best_key = w, key
    if best is None:
        raise FitError("no start of the optimisation gave finite predicted losses")
    pred = losses(best)
    band = None
    if fit.boot:
        lo, hi = fit.band(np.array([target_size]), best[None, :])
        band = {p: [float(lo[0, i]), float(hi[0, i])] for i, p in enumerate(pairs)}
    out = {"target_size": float(target_size), "law": fit.form,
           "weights": {p: float(best[i]) for i, p in enumerate(pairs)},
           "predicted": {p: float(pred[i]) for i, p in enumerate(pairs)}, "band": band,
           "objective": objective(best),
           "feasible": not constraint_violations(best, pred, cap, lmax, pairs),
           "constraints": {"max_weights": {p: float(cap[i]) for i, p in enumerate(pairs)},
                           "max_weights_source": cap_source,
                           "max_loss": {p: float(lmax[i]) for i, p in enumerate(pairs)
                                        if np.isfinite(lmax[i])},
                           "preferences": {p: float(pi[i]) for i, p in enumerate(pairs)},
                           "budget_examples": budget_examples, "epoch_cap": epoch_cap}}
    out["baselines"], out["baselines_skipped"] = baseline_mixtures(
        pairs, ds, budget_examples, epoch_cap, losses, objective, cap, lmax)
    uni = out["baselines"]["uniform"]["objective"]
    out["gain_over_uniform"] = float(uni - out["objective"])
    return out
