"""Recommended weights: the mixture minimising the preference-weighted mean predicted loss of a
fitted mixture law at a target size — its band's upper end when the law has bootstrap refits —
under per-pair maximum weights, maximum losses and minimum weights where the design has data
(:func:`support_bounds`), with the baselines (:mod:`fitting.laws.mixture.baselines`) at the
same size."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from fitting.core.base import FitError
from fitting.data.sampling import epoch_cap_weights
from fitting.laws.mixture.baselines import baseline_mixtures, constraint_violations
from fitting.laws.mixture.domain import EpochCap, outside_domain
from fitting.laws.mixture.laws import MixtureLawFit
from fitting.laws.mixture.runs import MixtureRuns

__all__ = ["MixtureConstraints", "recommend_mixture", "support_bounds", "BAND_Z", "SUPPORT_POINTS"]

#: the criterion's multiple of the bootstrap sd: L + 1.96 sd, the upper end of a normal 95 % band
BAND_Z = 1.96
#: bootstrap refits whose sd the criterion reads (the first ones; each costs a prediction)
BAND_REFITS = 40
#: fitted design mixtures a pair needs at or below a weight for the laws to be trusted there
SUPPORT_POINTS = 2


def support_bounds(runs: MixtureRuns, *, epoch_cap: EpochCap | None = None,
                   points: int = SUPPORT_POINTS) -> dict[str, float]:
    """Per pair the least weight at which the laws have data: the ``points``-th smallest
    distinct weight of the pair among the fitted (not held-out) runs whose loss of that pair is
    inside the laws' domain (:func:`~fitting.laws.mixture.domain.outside_domain`: trained, not
    over the epoch cap). Below it a law extrapolates towards the zero-shot loss it never saw
    (weight 0 is never in the domain, so the bound is > 0). A pair with fewer such weights gets
    the largest it has; one with none gets 1/K."""
    masks = outside_domain(runs, epoch_cap=epoch_cap)
    inside = np.isfinite(runs.Y) & ~np.logical_or.reduce(list(masks.values()))
    inside &= ~runs.heldout[:, None]
    out = {}
    for i, p in enumerate(runs.pairs):
        w = np.unique(np.round(runs.W[inside[:, i], i], 9))
        out[p] = float(w[min(points, len(w)) - 1]) if len(w) else 1.0 / len(runs.pairs)
    return out


def _project(v: np.ndarray, cap: np.ndarray, total: float = 1.0) -> np.ndarray:
    """Euclidean projection onto {0 ≤ w ≤ cap, Σ w = total} (bisection on the shift)."""
    lo, hi = np.min(v - cap) - 1.0, np.max(v) + 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if np.clip(v - mid, 0.0, cap).sum() > total:
            lo = mid
        else:
            hi = mid
    return np.clip(v - 0.5 * (lo + hi), 0.0, cap)


def _project_box(v: np.ndarray, floor: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Projection onto {floor ≤ w ≤ cap, Σ w = 1}: the box shifted to start at 0."""
    return floor + _project(v - floor, cap - floor, 1.0 - floor.sum())


def _floors(min_weights: dict | None, pairs: list[str], cap: np.ndarray
            ) -> tuple[np.ndarray, str | None]:
    """The lower bounds as a vector (each at most its cap; scaled to sum ≤ 1), and a note when
    they had to be scaled."""
    floor = np.minimum(np.clip(_vec(min_weights, pairs, 0.0, "min_weights"), 0.0, 1.0), cap)
    total = floor.sum()
    if total > 1.0 - 1e-9:
        return floor * (1.0 - 1e-6) / total, (f"the minimum weights sum to {total:.3g} > 1; "
                                              "scaled down together")
    return floor, None


def _binding(w: np.ndarray, floor: np.ndarray, cap: np.ndarray, pairs: list[str],
             note: str | None) -> dict:
    """``recommendation["bounds"]``: the minimum weights and the pairs held at a bound."""
    return {"min_weights": {p: float(floor[i]) for i, p in enumerate(pairs)},
            "at_min": [p for i, p in enumerate(pairs) if floor[i] > 0 and w[i] <= floor[i] + 1e-6],
            "at_max": [p for i, p in enumerate(pairs) if cap[i] < 1 and w[i] >= cap[i] - 1e-6],
            "note": note}


def _target_note(fit: MixtureLawFit, n: float) -> str:
    """Where the target size lies relative to the fitted sizes."""
    sizes = sorted(float(x) for x in fit.sizes or [])
    if not sizes or any(abs(n / s - 1) < 1e-6 for s in sizes):
        return f"N = {n:.4g}, a fitted size"
    if n > sizes[-1]:
        return f"N = {n:.4g}, extrapolated {n / sizes[-1]:.2g}x beyond the largest fitted size"
    if n < sizes[0]:
        return f"N = {n:.4g}, below the smallest fitted size ({sizes[0]:.4g})"
    return f"N = {n:.4g}, between the fitted sizes"


def _vec(d: dict | None, pairs: list[str], default: float, what: str) -> np.ndarray:
    d = d or {}
    unknown = [p for p in d if p not in pairs]
    if unknown:
        raise FitError(f"{what}: unknown pair(s) {unknown}; pairs: {pairs}", column="pair")
    return np.array([float(d.get(p, default)) for p in pairs])


@dataclass(frozen=True)
class MixtureConstraints:
    """What a recommended mixture must meet and whom it serves: ``max_weights`` {pair: w} and
    ``min_weights`` {pair: w} (e.g. :func:`support_bounds`), ``max_loss`` {pair: L} at the
    target size, ``preferences`` {pair: importance π} (default equal), and the epoch cap
    (``epoch_cap`` epochs of each pair's ``data_size`` within ``budget_examples`` examples)."""

    max_weights: dict[str, float] | None = None
    max_loss: dict[str, float] | None = None
    preferences: dict[str, float] | None = None
    data_size: dict[str, float] | None = None
    budget_examples: float | None = None
    epoch_cap: float | None = None
    min_weights: dict[str, float] | None = None


def recommend_mixture(fit: MixtureLawFit, target_size: float,
                      constraints: MixtureConstraints | None = None, *, band_z: float = BAND_Z,
                      n_starts: int = 8, seed: int = 0) -> dict:
    """Weights on the simplex minimising Σ_i π_i L_i(N, w) / Σ_i π_i of the law ``fit`` at
    N = ``target_size`` subject to w_i ≤ max weight (caller's, and epoch_cap · data_size_i /
    budget when all three are known) and L_i(N, w) ≤ max loss; SLSQP from ``n_starts`` starts
    (uniform and seeded Dirichlet draws, projected on the feasible box). Baselines at the same N:
    uniform, temperature T ∈ {1, 5, 100} (need data sizes) and UniMax (data sizes, budget and
    epoch cap).

    ``min_weights`` (e.g. :func:`support_bounds`): w_i ≥ the pair's bound (capped at its maximum
    weight; scaled down together if they sum above 1), so the optimiser stays where the law has
    data. With bootstrap refits the weights minimise Σ_i π_i (L_i + ``band_z`` · sd_i) / Σ π_i,
    sd_i the refits' sd of L_i at w (the band's upper end), not the point estimate alone; the
    result's ``objective`` is still the point estimate Σ π_i L_i (``criterion`` holds the other).
    ``bounds`` says which bounds bind at the optimum. The bounds, preferences and data sizes
    are ``constraints`` (:class:`MixtureConstraints`; none by default)."""
    from scipy.optimize import minimize

    c = constraints or MixtureConstraints()
    max_weights, max_loss, preferences = c.max_weights, c.max_loss, c.preferences
    data_size, budget_examples, epoch_cap = c.data_size, c.budget_examples, c.epoch_cap
    min_weights = c.min_weights

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
    floor, floor_note = _floors(min_weights, pairs, cap)
    lmax = _vec(max_loss, pairs, np.inf, "max_loss")
    pref = _vec(preferences, pairs, 1.0, "preferences")
    if np.any(pref < 0) or pref.sum() <= 0:
        raise FitError("preferences: expected non-negative numbers, not all zero")
    has = np.array([any(key.split("@")[0] == p for key in fit.solutions or {}) for p in pairs])
    if preferences and any(not has[pairs.index(p)] for p in preferences):
        raise FitError(f"preferences: {[p for p in preferences if not has[pairs.index(p)]]} "
                       "have no loss (weight-only domains, sources only)", column="pair")
    pi = np.where(has, pref, 0.0) / np.where(has, pref, 0.0).sum()

    def losses(w):
        return fit.predict(np.array([target_size]), w[None, :])[0]

    def objective(w):  # a weight-only domain (no loss, π = 0) is predicted NaN: left out
        return float(pi[has] @ losses(w)[has])

    use_band = bool(fit.boot) and band_z > 0
    few = copy.copy(fit)
    few.boot = (fit.boot or [])[:BAND_REFITS]  # the sd from the first refits: 40 are enough

    def criterion(w):
        if not use_band:
            return objective(w)
        samples = few.predict_samples(np.array([target_size]), w[None, :])[:, 0, :]
        with np.errstate(all="ignore"):
            sd = np.nanstd(np.where(np.isfinite(samples), samples, np.nan), axis=0)
        return float(pi[has] @ (losses(w) + band_z * np.nan_to_num(sd))[has])

    cons = [{"type": "eq", "fun": lambda w: np.sum(w) - 1.0}]
    fin = np.isfinite(lmax)
    if fin.any():
        cons.append({"type": "ineq", "fun": lambda w: (lmax - losses(w))[fin]})

    def search(fun, starts) -> list:
        """(violation, fun) and weights from SLSQP at each start, best first."""
        found = []  # end points judged by violation and objective, converged or not
        for s in starts:
            w0 = _project_box(np.asarray(s), floor, cap)
            with np.errstate(all="ignore"):
                res = minimize(fun, w0, method="SLSQP", bounds=list(zip(floor, cap, strict=True)),
                               constraints=cons, options={"maxiter": 300, "ftol": 1e-10})
            w = _project_box(np.asarray(res.x), floor, cap)
            pred = losses(w)
            if np.all(np.isfinite(pred[has])):
                viol = float(np.sum(np.clip(pred - lmax, 0.0, None)[fin]))
                found.append(((round(viol, 9), fun(w)), w))
        return sorted(found, key=lambda t: t[0])

    rng = np.random.default_rng(seed)
    starts = [np.full(k, 1.0 / k)] + list(rng.dirichlet(np.ones(k), max(0, n_starts - 1)))
    found = search(objective, starts)
    if not found:
        raise FitError("no start of the optimisation gave finite predicted losses")
    if use_band:  # the band is costly: polished from the best point optima and uniform
        found = search(criterion, [w for _, w in found[:2]] + starts[:1]) or found
    best = found[0][1]
    pred = losses(best)
    band = None
    if fit.boot:
        lo, hi = fit.band(np.array([target_size]), best[None, :])
        band = {p: [float(lo[0, i]), float(hi[0, i])] for i, p in enumerate(pairs)}
    out = {"target_size": float(target_size), "law": fit.form,
           "weights": {p: float(best[i]) for i, p in enumerate(pairs)},
           "predicted": {p: float(pred[i]) for i, p in enumerate(pairs)}, "band": band,
           "objective": objective(best),
           "criterion": {"value": criterion(best),
                         "kind": (f"upper band: sum of pi_i (L_i + {band_z:g} bootstrap sd_i)"
                                  if use_band else "point estimate (no bootstrap refits)")},
           "bounds": _binding(best, floor, cap, pairs, floor_note),
           "target_note": _target_note(fit, target_size),
           "feasible": not constraint_violations(best, pred, cap, lmax, pairs),
           "constraints": {"max_weights": {p: float(cap[i]) for i, p in enumerate(pairs)},
                           "max_weights_source": cap_source,
                           "max_loss": {p: float(lmax[i]) for i, p in enumerate(pairs)
                                        if np.isfinite(lmax[i])},
                           "preferences": {p: float(pi[i]) for i, p in enumerate(pairs)},
                           "budget_examples": budget_examples, "epoch_cap": epoch_cap}}
    out["baselines"], out["baselines_skipped"] = baseline_mixtures(
        pairs, ds, budget_examples, epoch_cap, losses, objective, cap, lmax, criterion)
    uni = out["baselines"]["uniform"]["objective"]
    out["gain_over_uniform"] = float(uni - out["objective"])
    return out
