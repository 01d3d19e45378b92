"""Mixture laws for K language pairs fitted: pair i's final loss L_i from the size N and the
weights w, in the four forms of :mod:`fitting.laws.mixture.forms` (``transfer``, ``datamixing``,
``additive``, ``joint``), each fitted per target pair i over all runs (design mixtures, all
sizes) with the robust engine (:func:`fitting.core.engine.varpro_fit`: the parameters that enter
linearly are solved exactly, the others searched from the pooled start points of the form's
grids with the analytic Jacobian, the best polished robustly).

Uncertainty: bootstrap over design mixtures (all sizes of a mixture resampled together), each
refit started from the fit's solution at its f_scale; a refit that fails (no convergence, too
few runs) is dropped and counted, never replaced by the estimate; bands are percentiles of the
predictions over the successful refits (:mod:`fitting.core.uncertainty`). Cross-validation
refits (:func:`refit_mixture_law` with ``from_grid``) start from the same grids as a full fit.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import least_squares

from fitting.core.base import FitError, FitResult, register_law
from fitting.core.engine import (
    VarproModel,
    VarproOptions,
    goodness_of_fit,
    require_converged,
    varpro_fit,
)
from fitting.core.uncertainty import percentile_range
from fitting.laws.mixture.forms import (
    BUDGET_FORMS,
    FORMS,
    LawSpec,
    budgets,
    effective_weight,
    form_spec,
    law_spec,
    other_pairs,
    scaled_size,
)

__all__ = ["FORMS", "MixtureLawFit", "fit_mixture_law", "refit_mixture_law", "predict_with",
           "effective_weight", "bootstrap_resamples", "bootstrap_refits", "attach_bootstrap",
           "budgets", "BUDGET_FORMS"]

# the robust polish searches this subset of Ghorbani's f_scale grid (same range, 5 values)
_F_SCALES = np.geomspace(0.001, 0.025, 5)
_HUBER_DELTA = 0.02  # Ye et al. 2024


def _polish(spec: LawSpec, u, W, y, warm: dict, loss: str) -> dict:
    """A refit started from ``warm`` (θ, linear coefficients, f_scale): one bounded robust
    ``least_squares`` over (θ, c) at that f_scale with the analytic Jacobian (bootstrap refits).
    Raises FitError when it does not converge (:func:`fitting.core.engine.converged`) within
    100 evaluations per parameter or gives non-finite residuals: the caller counts it as a failed
    refit."""
    th0, c0 = np.asarray(warm["theta"], float), np.asarray(warm["coef"], float)
    p, k = len(th0), len(c0)
    lo = np.concatenate([spec.lo, np.zeros(k)])
    hi = np.concatenate([spec.hi, np.full(k, np.inf)])
    x0 = np.clip(np.concatenate([th0, c0]), lo + 1e-12, np.where(np.isfinite(hi), hi - 1e-12,
                                                                  np.inf))

    def resid(x):
        return y - spec.design(x[:p], u, W) @ x[p:]

    def jac(x):
        A = spec.design(x[:p], u, W)
        return np.column_stack([-(dA @ x[p:]) for dA in spec.jac(x[:p], u, W)] + [-A])

    with np.errstate(all="ignore"):
        sol = least_squares(resid, x0, jac=jac, bounds=(lo, hi), loss=loss,
                            f_scale=float(warm["f_scale"]), x_scale="jac",
                            max_nfev=100 * (p + k + 1), ftol=1e-7, xtol=1e-7)
    if not np.all(np.isfinite(sol.fun)):
        raise FitError("refit gave non-finite residuals")
    require_converged(sol, "refit")
    return {"theta": [float(v) for v in sol.x[:p]], "coef": [float(v) for v in sol.x[p:]],
            "f_scale": float(warm["f_scale"]), "points": int(len(y))}


def _solve(spec: LawSpec, u, W, y, *, loss, n_refine: int = 2) -> tuple:
    """Robust fit of one target: the start points of every grid of ``spec`` pooled, the best
    ``n_refine`` by projected least-squares cost refined by variable projection, the best of
    those polished robustly (:func:`fitting.core.engine.varpro_fit`)."""
    huber = loss == "huber"
    model = VarproModel(lambda th: spec.design(th, u, W), theta_bounds=(spec.lo, spec.hi),
                        coef_nonneg=True, design_jac=lambda th: spec.jac(th, u, W))
    starts = [list(t) for grid in spec.grids for t in itertools.product(*grid)]
    return varpro_fit(model, y, theta_grid=spec.grids[0], theta_starts=starts,
                      options=VarproOptions(loss=loss, f_scale=_HUBER_DELTA if huber else "auto",
                                            f_scale_grid=None if huber else _F_SCALES,
                                            n_refine=n_refine, search_jac=True))


@register_law("mixture")
@dataclass
class MixtureLawFit(FitResult):
    """One mixture law fitted for every target pair (module docstring for the forms).

    ``params``: readable parameters, e.g. ``alpha[en-de]``, ``tau[en-de,en-fr]`` (τ of source
    en-fr on target en-de), ``t[en-de,en-fr@1]`` (Ye's t at the second size), ``C[en-de,en-fr]``.
    ``solutions``: key (pair, or pair@size index for ``datamixing``) → θ, linear coefficients and
    f_scale of the engine; ``boot``: the same per bootstrap refit (bands, warm starts).
    ``d_ref``: set when the token budget D enters the law (``additive`` and ``joint`` fitted to
    runs of several budgets: ``B[pair]``, ``beta_d[pair]``); predictions without a D use
    ``d_default`` (the largest budget of the fitted runs).
    """

    form: str = "transfer"
    pairs: list[str] | None = None
    sizes: list[float] | None = None
    n_ref: float = 1.0
    d_ref: float | None = None
    d_default: float | None = None
    solutions: dict | None = None
    boot: list | None = None
    n_mixtures: int = 0

    @property
    def sized(self) -> bool:
        """Whether N enters the law (more than one fitted size)."""
        return len(self.sizes or []) > 1

    @property
    def n_params(self) -> int:
        """Fitted parameters over all targets (θ and linear)."""
        return int(sum(len(s["theta"]) + len(s["coef"]) for s in (self.solutions or {}).values()))

    def _size_index(self, n: np.ndarray) -> np.ndarray:
        sz = np.asarray(self.sizes, dtype=np.float64)
        rel = np.abs(n[:, None] / sz[None, :] - 1.0)
        idx = np.argmin(rel, axis=1)
        return np.where(rel[np.arange(len(n)), idx] < 1e-6, idx, -1)

    def _predict(self, sol: dict, n, W, d=None) -> np.ndarray:
        k = len(self.pairs or [])
        n = np.atleast_1d(np.asarray(n, dtype=np.float64))
        W = np.atleast_2d(np.asarray(W, dtype=np.float64))
        n = np.broadcast_to(n, (len(W),)).astype(np.float64)
        d = None if self.d_ref is None else np.broadcast_to(np.asarray(
            self.d_default if d is None else d, dtype=np.float64), (len(W),))
        out = np.full((len(W), k), np.nan)
        at = self._size_index(n)
        for i, pair in enumerate(self.pairs or []):
            if self.form == "datamixing":
                for s in range(len(self.sizes or [])):
                    rows = at == s
                    key = f"{pair}@{s}"
                    if rows.any() and key in sol:
                        spec = form_spec(self.form, i, k, False)
                        A = spec.design(np.asarray(sol[key]["theta"]), n[rows], W[rows])
                        out[rows, i] = A @ np.asarray(sol[key]["coef"])
                continue
            spec = law_spec(self.form, i, k, self.sized, self.d_ref is not None)
            rows = np.ones(len(W), bool) if self.sized else at == 0
            if not rows.any() or pair not in sol:
                continue
            u = scaled_size(n[rows], None if d is None else d[rows], self.n_ref,
                        self.d_ref if self.form in BUDGET_FORMS else None, self.sized)
            with np.errstate(all="ignore"):
                A = spec.design(np.asarray(sol[pair]["theta"]), u, W[rows])
            out[rows, i] = A @ np.asarray(sol[pair]["coef"])
        return out

    def predict(self, n: ArrayLike, W: ArrayLike, d: ArrayLike | None = None) -> np.ndarray:
        """Predicted losses, shape (runs, pairs), for sizes ``n``, weight rows ``W`` (columns
        in ``pairs`` order) and token budgets ``d`` (used by a law that takes D; default
        ``d_default``). NaN where the law cannot predict (a size it was not fitted at, for
        ``datamixing`` and single-size fits)."""
        return self._predict(self.solutions or {}, n, W, d)

    def predict_samples(self, n: ArrayLike, W: ArrayLike, d: ArrayLike | None = None
                        ) -> np.ndarray:
        """Predictions on every bootstrap refit, shape (refits, runs, pairs); NaN for a target
        whose refit failed in that resample."""
        if not self.boot:
            raise FitError("this mixture law has no bootstrap refits")
        return np.stack([self._predict(s, n, W, d) for s in self.boot])

    def band(self, n: ArrayLike, W: ArrayLike, level: float = 0.95,
             d: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Percentile band of :meth:`predict` over the successful bootstrap refits (widened to
        contain the prediction itself)."""
        return percentile_range(self.predict_samples(n, W, d), level,
                                estimate=self.predict(n, W, d))

    def can_predict(self, n: float) -> bool:
        """Whether the law predicts at size ``n`` (every form when N enters it; else a fitted
        size)."""
        if self.sized and self.form != "datamixing":
            return True
        return bool(self._size_index(np.array([float(n)]))[0] >= 0)


def _readable(form: str, sol: dict, pairs: list[str], sizes: list[float], n_ref: float,
              sized: bool, d_ref: float | None = None) -> dict[str, float]:
    """The papers' parameters from the engine's (θ, c) solutions."""
    out: dict[str, float] = {}
    k = len(pairs)
    for i, p in enumerate(pairs):
        oth = other_pairs(i, k)
        if form == "datamixing":
            for s in range(len(sizes)):
                if f"{p}@{s}" not in sol:
                    continue
                th, c = sol[f"{p}@{s}"]["theta"], sol[f"{p}@{s}"]["coef"]
                out[f"c[{p}@{s}]"], out[f"k[{p}@{s}]"] = c[0], c[1]
                for j, t in zip(oth, th, strict=True):
                    out[f"t[{p},{pairs[j]}@{s}]"] = t
            continue
        if p not in sol:
            continue
        th, c = sol[p]["theta"], sol[p]["coef"]
        if form == "transfer":
            n0 = n_ref if sized else sizes[0]  # β_u (e·N/n0)^−α = β (e·N)^−α
            out[f"alpha[{p}]"] = th[0]
            out[f"beta[{p}]"] = c[0] * n0 ** th[0]
            out[f"l_inf[{p}]"] = c[1]
            for j, t in zip(oth, th[1:], strict=True):
                out[f"tau[{p},{pairs[j]}]"] = t
            continue
        s = max(c[1], 1e-300)
        out[f"E[{p}]"] = c[0]
        out[f"gamma[{p}]"] = th[1]
        out[f"C[{p},{p}]"] = 1.0 / s
        for j, cj in zip(oth, th[2:2 + len(oth)], strict=True):
            out[f"C[{p},{pairs[j]}]"] = cj / s
        if d_ref is not None:
            out[f"beta_d[{p}]"] = th[-1]
            out[f"B[{p}]"] = c[-1] * d_ref ** th[-1]
        if sized:
            out[f"alpha[{p}]"] = th[0]
            if form == "additive":
                out[f"A[{p}]"] = c[2] * n_ref ** th[0]
            else:
                for j in range(k):
                    out[f"a[{p},{pairs[j]}]"] = c[2 + j] * n_ref ** th[0]
    return {key: float(v) for key, v in out.items()}


def _targets(form: str, pairs, sizes, n, sized):
    """(solution key, pair index, row mask for this key given n) for every fit of the law."""
    if form == "datamixing":
        return [(f"{p}@{s}", i, np.isclose(n, sz, rtol=1e-6))
                for i, p in enumerate(pairs) for s, sz in enumerate(sizes)]
    return [(p, i, np.ones(len(n), bool)) for i, p in enumerate(pairs)]


def _fit_all(form, pairs, sizes, n_ref, n, W, Y, warm: dict | None,
             failed: list[str] | None = None, d=None, d_ref: float | None = None) -> dict:
    """Solutions of every target (:func:`_targets`): from the start grids (``warm`` None) or
    polished from ``warm``'s solution of the same target. A target that cannot be fitted (too
    few runs with a loss, no convergence) raises FitError, or with a ``failed`` list is
    appended to it and left out of the solutions. ``d``, ``d_ref``: token budgets and their
    reference for the forms that take D (``d_ref`` None: D does not enter)."""
    k, sized = len(pairs), len(sizes) > 1
    d_ref = d_ref if form in BUDGET_FORMS else None
    loss = "huber" if form == "datamixing" else "soft_l1"
    sol: dict = {}
    for key, i, rows in _targets(form, pairs, sizes, n, sized):
        if not np.isfinite(Y[:, i]).any():
            continue  # a weight-only domain: a source, never a target
        rows = rows & np.isfinite(Y[:, i])
        spec = law_spec(form, i, k, sized and form != "datamixing", d_ref is not None)
        u = scaled_size(n[rows], None if d_ref is None else d[rows], n_ref, d_ref,
                    sized and form != "datamixing")
        try:
            if rows.sum() < len(spec.theta_names) + len(spec.coef_names) + 1:
                raise FitError(f"{form}: {int(rows.sum())} runs with a loss for {key}; the law "
                               f"has {len(spec.theta_names) + len(spec.coef_names)} parameters "
                               "for it", column="value")
            if warm is not None:
                if key not in warm:
                    raise FitError(f"{form}: no solution of {key} to start the refit from")
                sol[key] = _polish(spec, u, W[rows], Y[rows, i], warm[key], loss)
                continue
            with np.errstate(all="ignore"):
                res = _solve(spec, u, W[rows], Y[rows, i], loss=loss)
        except (FitError, ValueError, np.linalg.LinAlgError):
            if failed is None:
                raise
            failed.append(key)
            continue
        sol[key] = {"theta": [float(v) for v in res.theta], "coef": [float(v) for v in res.coef],
                    "f_scale": float(res.f_scale), "points": int(rows.sum())}
    return sol


def fit_mixture_law(form: str, n: ArrayLike, W: ArrayLike, Y: ArrayLike, pairs: list[str], *,
                    groups: ArrayLike | None = None, n_boot: int = 0, seed: int = 0,
                    d: ArrayLike | None = None) -> MixtureLawFit:
    """Fit one mixture law (module docstring) to runs: sizes ``n`` (R,), weights ``W`` (R, K)
    in ``pairs`` order, losses ``Y`` (R, K) with NaN where a pair was not evaluated.

    ``groups``: one design-mixture label per run; ``n_boot`` bootstrap refits resample them
    (seeded by ``seed``) for parameter sd, intervals and prediction bands. ``d``: each run's
    token budget; when it varies, the forms of :data:`BUDGET_FORMS` add B_i (D/D_ref)^−β_i.
    """
    if form not in FORMS:
        raise FitError(f"unknown mixture law form {form!r}; expected one of {FORMS}")
    n = np.asarray(n, dtype=np.float64)
    W = np.asarray(W, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    sizes = sorted(float(s) for s in np.unique(n))
    if form == "joint" and len(sizes) < 2:
        raise FitError("joint law: one model size only, where it equals the additive law",
                       column="n")
    n_ref = float(np.exp(np.mean(np.log(n))))
    d, d_ref = budgets(d, len(n))
    law_d_ref = d_ref if form in BUDGET_FORMS else None
    sol = _fit_all(form, pairs, sizes, n_ref, n, W, Y, None, d=d, d_ref=law_d_ref)
    fit = MixtureLawFit(law="mixture", params=_readable(form, sol, pairs, sizes, n_ref,
                                                         len(sizes) > 1, law_d_ref),
                        form=form, pairs=list(pairs), sizes=sizes, n_ref=n_ref, solutions=sol,
                        d_ref=law_d_ref,
                        d_default=None if law_d_ref is None else float(np.max(d)))
    if d_ref is not None and law_d_ref is None:
        fit.warnings.append(f"the token budget varies ({d.min():.3g}–{d.max():.3g}); the "
                            f"{form} law has no D term (only {', '.join(BUDGET_FORMS)} take it)")
    groups = np.arange(len(n)) if groups is None else np.asarray(groups)
    fit.n_mixtures = int(len(np.unique(groups)))
    fit.n_points = int(np.isfinite(Y).sum())
    pred = fit.predict(n, W, d)
    ok = np.isfinite(Y) & np.isfinite(pred)
    fit.goodness = goodness_of_fit(Y[ok], pred[ok], fit.n_params)
    for i, p in enumerate(pairs):
        m = ok[:, i]
        if m.sum() > 1:
            fit.goodness[f"rmse[{p}]"] = float(np.sqrt(np.mean((Y[m, i] - pred[m, i]) ** 2)))
    if not fit.sized and form in ("transfer", "additive"):
        fit.warnings.append(f"one model size (N = {sizes[0]:.3g}): N does not enter the fit, "
                            "α and β (A) are not separately identifiable; the law predicts at "
                            "that size only")
    if n_boot:
        attach_bootstrap(fit, bootstrap_refits(fit, n, W, Y, bootstrap_resamples(groups, n_boot,
                                                                                 seed), d), seed)
    return fit


def refit_mixture_law(fit: MixtureLawFit, n: ArrayLike, W: ArrayLike, Y: ArrayLike, *,
                      from_grid: bool = False, failed: list[str] | None = None,
                      d: ArrayLike | None = None) -> dict:
    """The law's solutions refitted to other runs (a subset): each target polished from
    ``fit``'s solution at its f_scale (bootstrap), or with ``from_grid`` fitted from the same
    start grids as a full fit, never from ``fit``'s optimum (cross-validation). Sizes and the
    reference size are ``fit``'s, so :func:`predict_with` predicts with the result. A target
    that cannot be refitted raises FitError, or with a ``failed`` list is appended to it and
    left out. ``d``: the runs' token budgets (needed when D enters the law)."""
    n = np.asarray(n, dtype=np.float64)
    sizes = list(fit.sizes or [])
    if fit.d_ref is not None and d is None:
        raise FitError(f"the {fit.form} law takes the token budget D: pass d for the refit")
    return _fit_all(fit.form, fit.pairs or [], sizes, fit.n_ref, n, np.asarray(W, np.float64),
                    np.asarray(Y, np.float64), None if from_grid else fit.solutions or {},
                    failed, None if d is None else np.asarray(d, np.float64), fit.d_ref)


def predict_with(fit: MixtureLawFit, solutions: dict, n: ArrayLike, W: ArrayLike,
                 d: ArrayLike | None = None) -> np.ndarray:
    """:meth:`MixtureLawFit.predict` with other solutions (from :func:`refit_mixture_law`);
    NaN for a target those solutions lack (it could not be refitted)."""
    return fit._predict(solutions, n, W, d)


def bootstrap_resamples(groups: ArrayLike, n_boot: int, seed: int) -> list[np.ndarray]:
    """Row indices of ``n_boot`` resamples over design mixtures (all runs of a drawn mixture
    label in ``groups`` together), seeded."""
    rng = np.random.default_rng(seed)
    labels, inv = np.unique(np.asarray(groups), return_inverse=True)
    members = [np.flatnonzero(inv == g) for g in range(len(labels))]
    return [np.concatenate([members[g] for g in rng.integers(0, len(members), len(members))])
            for _ in range(int(n_boot))]


def bootstrap_refits(fit: MixtureLawFit, n: ArrayLike, W: ArrayLike, Y: ArrayLike,
                     resamples: list[np.ndarray], d: ArrayLike | None = None
                     ) -> list[tuple[dict, list[str]]]:
    """(solutions, failed targets) of the law refitted to each resample, polished from the
    fit's solution; a target whose refit fails is absent from that resample's solutions."""
    n, W, Y = (np.asarray(a, dtype=np.float64) for a in (n, W, Y))
    out = []
    for idx in resamples:
        failed: list[str] = []
        sol = refit_mixture_law(fit, n[idx], W[idx], Y[idx], failed=failed,
                                d=None if d is None else np.asarray(d, np.float64)[idx])
        out.append((sol, failed))
    return out


def attach_bootstrap(fit: MixtureLawFit, refits: list[tuple[dict, list[str]]], seed: int) -> None:
    """Set ``boot``, ``stderr``, ``intervals`` and ``meta["bootstrap"]`` of ``fit`` from
    :func:`bootstrap_refits`. A failed target refit is dropped from that resample, never
    replaced by the point estimate: each target's bands and sd come from its successful
    refits, and ``meta["bootstrap"]["failed"]`` counts the failures per target."""
    keys = list((fit.solutions or {}).keys())
    failed = {key: sum(key in f for _, f in refits) for key in keys}
    fit.boot = [sol for sol, _ in refits]
    total = len(refits) * len(keys)
    fit.meta["bootstrap"] = {"resamples": len(refits), "target_refits": total,
                             "failed_refits": int(sum(failed.values())),
                             "failed": {k: v for k, v in failed.items() if v}, "seed": seed}
    fit.meta["uncertainty"] = (f"bootstrap over design mixtures: {len(refits)} resamples, "
                               f"{sum(failed.values())} of {total} target refits failed "
                               f"(dropped, not replaced), seed {seed}")
    draws = [_readable(fit.form, s, fit.pairs or [], fit.sizes or [], fit.n_ref, fit.sized,
                       fit.d_ref) for s in fit.boot]
    arr = {k: np.array([d.get(k, np.nan) for d in draws]) for k in fit.params}
    fit.stderr, fit.intervals = {}, {}
    for k, v in arr.items():
        v = v[np.isfinite(v)]
        if len(v) < 2:
            continue
        fit.stderr[k] = float(np.std(v, ddof=1))
        lo, hi = percentile_range(v[:, None], 0.95, estimate=np.array([fit.params[k]]))
        fit.intervals[k] = (float(lo[0]), float(hi[0]))
