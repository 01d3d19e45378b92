"""What the schedule-aware curve laws share: one fit over several runs (curves) with shared
parameters, optional size terms, relative residuals, perturbation uncertainty, held-out errors.

A law (:class:`CurveLaw`) writes the loss of a run at step t as
L(t) = g(t; θ) · (L0 + Σ_j c_j · X_j(t; θ)), linear coefficients c ≥ 0 and a few nonlinear θ
(the annealing law, :mod:`.annealing`; the Multi-Power Law, :mod:`.multipower`); with size terms
L0(N) = E + A_N·N^−a, and two sizes need an assumption (:data:`SIZE_ASSUMPTIONS`: ``fixed_e``,
``size_exponent``). :func:`fit_curve_law` fits it by :func:`fitting.core.engine.varpro_fit` on
relative residuals; :func:`heldout_errors` scores held-out runs. The size terms, the thinning of
the points and the uncertainty: docs/reference/laws.md, "Schedule-aware curve laws".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fitting.core.base import FitError, FitResult
from fitting.core.engine import (
    F_SCALE_GRID,
    VarproModel,
    VarproOptions,
    goodness_of_fit,
    varpro_fit,
)
from fitting.core.options import UncertaintyOptions
from fitting.core.uncertainty import perturbation_samples, summarize_samples
from fitting.laws.curves.runs import Curve

__all__ = ["CurveLaw", "CurveFitOptions", "CURVE_UNCERTAINTY", "ScheduleLawFit", "fit_curve_law", "heldout_errors", "CURVE_F_SCALES",
           "WindowFeatures", "curve_features", "law_columns", "WINDOW_SAMPLES",
           "SIZE_ASSUMPTIONS", "size_constraints", "size_assumption_text", "sizes_needed"]

#: soft_l1 f_scale candidates (relative residuals): five values over Ghorbani App. E's range
CURVE_F_SCALES: np.ndarray = np.geomspace(F_SCALE_GRID[0], F_SCALE_GRID[-1], 5)

#: size-term exponent a: bounds and starting values
SIZE_BOUNDS = (0.01, 2.0)
SIZE_GRID = (0.2, 0.5, 1.0)

#: the size parameter each constraint fixes → the option that fixes it (library, CLI)
SIZE_ASSUMPTIONS = {"E": ("fixed_e", "--fixed-e VALUE"), "a": ("size_exponent",
                                                               "--size-exponent VALUE")}
#: the size terms' form, as stated in results
SIZE_FORM = "L0(N) = E + A_N·N^−a"


def size_constraints(fixed_e: float | None = None, size_exponent: float | None = None
                     ) -> dict[str, float]:
    """{"E": fixed_e, "a": size_exponent} of the given ones, checked (E finite ≥ 0, a finite
    > 0); FitError naming the bad one otherwise."""
    out: dict[str, float] = {}
    if fixed_e is not None:
        e = float(fixed_e)
        if not np.isfinite(e) or e < 0:
            raise FitError(f"fixed E must be a finite loss ≥ 0, got {fixed_e!r}", column="E")
        out["E"] = e
    if size_exponent is not None:
        a = float(size_exponent)
        if not np.isfinite(a) or a <= 0:
            raise FitError(f"the size exponent a must be finite and > 0, got {size_exponent!r}",
                           column="a")
        out["a"] = a
    return out


def sizes_needed(fixed: dict[str, float]) -> int:
    """Distinct sizes that identify L0(N) = E + A_N·N^−a with ``fixed`` given: one per free
    size parameter (3 free, 2 with E or a fixed, 1 with both)."""
    return 3 - len(fixed)


def size_assumption_text(fixed: dict[str, float], n_sizes: int) -> str:
    """One line stating the size terms' assumption, e.g. "L0(N) = E + A_N·N^−a with E fixed
    at 0 (given, not fitted); A_N, a fitted from 2 sizes"."""
    if not fixed:
        return f"{SIZE_FORM}, E, A_N, a fitted from {n_sizes} sizes (no assumption)"
    given = " and ".join(f"{k} fixed at {v:g}" for k, v in fixed.items())
    free = ", ".join(k for k in ("E", "A_N", "a") if k not in fixed)
    return (f"{SIZE_FORM} with {given} (an assumption: given, not fitted); {free} fitted from "
            f"{n_sizes} size{'s' if n_sizes != 1 else ''}")


class CurveLaw:
    """A schedule-aware law: ``theta_names`` (nonlinear, searched), ``coef_names`` (linear,
    ≥ 0), per-run ``features`` at given steps and the ``columns`` X_j(t; θ) they give."""

    name: str = ""
    theta_names: tuple[str, ...] = ()
    coef_names: tuple[str, ...] = ()
    theta_bounds: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    theta_grid: tuple[tuple[float, ...], ...] = ()

    def features(self, curve: Curve, steps: np.ndarray) -> Any:
        """Everything of ``curve``'s schedule the columns need at ``steps``."""
        raise NotImplementedError

    def columns(self, theta: np.ndarray, feats: Any) -> np.ndarray:
        """X (len(steps) × len(coef_names)) at θ."""
        raise NotImplementedError

    def scale(self, theta: np.ndarray, feats: Any) -> np.ndarray | None:
        """The factor g(t; θ) multiplying the whole law, constant included (len(steps));
        None = 1 (an additive law)."""
        return None

    @property
    def additive(self) -> bool:
        """True when :meth:`scale` is always None (g = 1): a fixed constant can then be taken
        off the losses (``fixed_e``)."""
        return True

    def named(self, theta: np.ndarray) -> dict[str, float]:
        """θ as reported parameters (a law searching log10 C reports C)."""
        return dict(zip(self.theta_names, map(float, theta), strict=True))

    def unnamed(self, params: dict[str, float]) -> np.ndarray:
        """The inverse of :meth:`named`."""
        return np.array([params[k] for k in self.theta_names], dtype=np.float64)


#: steps sampled in each loss window (:func:`curve_features`): 4 evenly spaced steps average a
#: window of 10 to within its curvature (their mean is the window's midpoint)
WINDOW_SAMPLES = 4


@dataclass(frozen=True)
class WindowFeatures:
    """A law's features at the steps sampled in the losses' windows (``inner``) and the
    (losses × sampled steps) matrix ``mean`` that averages each window's samples."""

    inner: Any
    mean: np.ndarray


def curve_features(law: CurveLaw, curve: Curve, steps: np.ndarray,
                   window: np.ndarray | None = None, samples: int = WINDOW_SAMPLES) -> Any:
    """``law``'s features at ``steps``, or, where a loss averages a window of w ≥ 1 updates
    (:attr:`Curve.window`: the models after s − w … s − 1 updates), at ``samples`` evenly spaced
    steps of each window (all w when fewer) with the matrix averaging them
    (:class:`WindowFeatures`; :func:`law_columns` reads either)."""
    steps = np.asarray(steps, dtype=np.float64)
    w = np.zeros_like(steps) if window is None else np.asarray(window, dtype=np.float64)
    if not np.any(w >= 1):
        return law.features(curve, steps)
    rows, sampled = [], []
    for i, (s, wi) in enumerate(zip(steps, np.floor(w), strict=True)):
        ks = (np.unique(np.round(np.linspace(s - wi, s - 1, int(min(wi, samples)))))
              if wi >= 1 else np.array([s]))
        rows.append(np.full(ks.size, i))
        sampled.append(np.maximum(ks, 1.0))  # S1(0) = 0: the law starts after update 1
    uniq, inv = np.unique(np.concatenate(sampled), return_inverse=True)
    mean = np.zeros((steps.size, uniq.size))
    np.add.at(mean, (np.concatenate(rows), inv), 1.0)
    return WindowFeatures(law.features(curve, uniq), mean / mean.sum(axis=1, keepdims=True))


def law_columns(law: CurveLaw, theta: np.ndarray, feats: Any) -> np.ndarray:
    """[g, g·X] at θ of :func:`curve_features`' result (g = :meth:`CurveLaw.scale`, 1 when
    None): the columns of L0 and of the linear coefficients, each window's mean of them."""
    inner = feats.inner if isinstance(feats, WindowFeatures) else feats
    x = law.columns(theta, inner)
    g = law.scale(theta, inner)
    g = np.ones(x.shape[0]) if g is None else np.asarray(g, dtype=np.float64)
    cols = np.column_stack([g, g[:, None] * x])
    return feats.mean @ cols if isinstance(feats, WindowFeatures) else cols


def _size_names(size_terms: bool, fixed: dict[str, float]) -> tuple[str, ...]:
    """The linear coefficients of the constant: L0, or E (unless fixed) and A_N."""
    if not size_terms:
        return ("L0",)
    return ("A_N",) if "E" in fixed else ("E", "A_N")


def _design(law: CurveLaw, feats: list, sizes: np.ndarray | None, theta: np.ndarray,
            fixed: dict[str, float]) -> np.ndarray:
    p = len(law.theta_names)
    x = np.vstack([law_columns(law, theta[:p], f) for f in feats])
    if sizes is None:
        base = [x[:, 0]]                  # L0 times g
    else:                                 # [E·g unless fixed, A_N·N^−a·g]
        a = fixed["a"] if "a" in fixed else theta[p]
        base = ([] if "E" in fixed else [x[:, 0]]) + [x[:, 0] * np.power(sizes, -a)]
    return np.column_stack(base + [x[:, 1:]])


@dataclass
class ScheduleLawFit(FitResult):
    """A schedule-aware curve law fitted jointly to several runs (module docstring).

    Fields besides FitResult's: ``runs`` the fitted runs; ``size_terms`` whether L0(N) =
    E + A_N·N^−a (else one L0); ``size_fixed`` the size parameters given, not fitted ({"E": …}
    and/or {"a": …}; {} = the free form; module docstring); ``from_step`` the first step
    fitted; ``limits``: ``L_inf`` = E (= L0 without size terms) and ``L0(N=…)`` per fitted
    size."""

    runs: list[str] = field(default_factory=list)
    size_terms: bool = False
    size_fixed: dict[str, float] = field(default_factory=dict)
    from_step: float = 0.0
    limits: dict[str, float] = field(default_factory=dict)

    def curve_law(self) -> CurveLaw:
        """The law object with this fit's settings (implemented by each law)."""
        raise NotImplementedError

    def converged_loss(self, n: float | None = None) -> float:
        """L0(N) = E + A_N·N^−a with size terms (``n`` needed), else L0."""
        p = self.params
        if not self.size_terms:
            return float(p["L0"])
        if n is None or not np.isfinite(n) or n <= 0:
            raise FitError("this fit has size terms L0(N) = E + A_N·N^−a: give the model size n",
                           column="n")
        return float(p["E"] + p["A_N"] * float(n) ** (-p["a"]))

    def predict(self, steps: Any, lr_steps: Any, lr: Any, n: float | None = None,
                window: Any = None) -> np.ndarray:
        """Predicted loss at ``steps`` of a run whose learning rate is logged at ``lr_steps``
        (interpolated piecewise-linearly, :func:`fitting.laws.curves.schedule.dense_lr`);
        ``window``: per step, the updates a logged loss averages (:attr:`Curve.window`; None =
        the model at each step)."""
        law = self.curve_law()
        st = np.asarray(steps, dtype=np.float64)
        curve = Curve("predict", lr_steps, lr, st, np.ones_like(st))
        theta = law.unnamed(self.params)
        coef = np.array([self.params[k] for k in law.coef_names])
        w = None if window is None else np.broadcast_to(np.asarray(window, float), st.shape)
        x = law_columns(law, theta, curve_features(law, curve, st, w))
        return self.converged_loss(n) * x[:, 0] + x[:, 1:] @ coef


def _thin(mask: np.ndarray, max_points: int) -> np.ndarray:
    idx = np.flatnonzero(mask)
    if max_points and idx.size > max_points:
        idx = idx[np.unique(np.round(np.linspace(0, idx.size - 1, max_points)).astype(int))]
    return idx


def _sizes_error(n_sizes: int, fixed: dict[str, float]) -> FitError:
    """Too few distinct sizes for the size terms: what to add (module docstring)."""
    free = [k for k in ("E", "a") if k not in fixed]
    if n_sizes == 2 and free:
        add = " or ".join(f"{SIZE_ASSUMPTIONS[k][1]} ({SIZE_ASSUMPTIONS[k][0]}=)" for k in free)
        how = (f"add {add} — two sizes identify L0(N) only with E or the exponent a given "
               "(e.g. --fixed-e 0: L0 = A_N·N^−a)")
    else:
        add = " and ".join(f"{SIZE_ASSUMPTIONS[k][1]} ({SIZE_ASSUMPTIONS[k][0]}=)" for k in free)
        how = f"add {add}" if n_sizes >= 1 else "give every run its size n"
    return FitError(f"size terms {SIZE_FORM} with {3 - len(fixed)} free size parameter(s) need "
                    f"at least {sizes_needed(fixed)} distinct sizes; the runs have {n_sizes}: "
                    f"{how}, or fit runs of more sizes", column="n")


#: the curve laws' refits by default: none (``mnmt-fit curves`` asks for 20 perturbation refits)
CURVE_UNCERTAINTY = UncertaintyOptions(method=None, n_refits=20)


@dataclass(frozen=True)
class CurveFitOptions:
    """How a schedule law is fitted to learning curves (:func:`fit_curve_law`).

    Attributes:
      size_terms: L0(N) = E + A_N·N^−a across sizes: None = on when the runs have at least 3
        distinct sizes N, or when ``fixed_e`` or ``size_exponent`` is given (every run needs its
        N then).
      fixed_e / size_exponent: E / a of L0(N) given, not fitted, so that fewer sizes identify it
        (module docstring); ``fixed_e`` needs an additive law (g = 1).
      from_step: the first step fitted (after each run's warm-up).
      max_points: losses per run, thinned evenly in step.
      f_scale: the soft_l1 scale, or ``"auto"`` (:data:`CURVE_F_SCALES`).
      uncertainty: the refits (:class:`~fitting.core.options.UncertaintyOptions`): method None
        or ``"perturbation"`` (losses × (1 + sigma_rel·ε), Fernandes fn. 5), ``n_refits``
        (default :data:`CURVE_UNCERTAINTY`: no refits), ``seed``, ``level``.
      n_refine: grid points refined by the θ search (:class:`~fitting.core.engine.VarproOptions`).
    """

    size_terms: bool | None = None
    fixed_e: float | None = None
    size_exponent: float | None = None
    from_step: float = 0.0
    max_points: int = 200
    f_scale: float | str = "auto"
    uncertainty: UncertaintyOptions = CURVE_UNCERTAINTY
    n_refine: int = 3


def fit_curve_law(
    law: CurveLaw,
    curves: dict[str, Curve] | list[Curve],
    *,
    options: CurveFitOptions = CurveFitOptions(),
) -> dict[str, Any]:
    """Fit ``law`` jointly to ``curves`` as ``options`` say; the pieces each law's result is
    built from. Returns params (fixed ones included), stderr, intervals (fitted ones only),
    goodness, n_points, warnings, meta, limits, size_fixed."""
    size_terms, from_step, max_points = options.size_terms, options.from_step, options.max_points
    f_scale, uncertainty, n_refine = options.f_scale, options.uncertainty, options.n_refine
    cs = list(curves.values()) if isinstance(curves, dict) else list(curves)
    if not cs:
        raise FitError("no curves to fit", column="run")
    fixed = size_constraints(options.fixed_e, options.size_exponent)
    if "E" in fixed and not law.additive:
        raise FitError(f"{law.name}: a fixed E needs an additive law (this form multiplies the "
                       "constant by exp(−C·S2)); give the size exponent instead "
                       "(size_exponent=, --size-exponent VALUE)", column="E")
    sizes_all = np.array([c.n for c in cs], dtype=np.float64)
    distinct = np.unique(sizes_all[np.isfinite(sizes_all)])
    if fixed and size_terms is False:
        raise FitError(f"{' and '.join(SIZE_ASSUMPTIONS[k][0] for k in fixed)} constrain the "
                       "size terms; they were turned off (size_terms=False)", column="n")
    if size_terms is None:
        size_terms = bool(fixed) or (distinct.size >= 3 and bool(np.all(np.isfinite(sizes_all))))
    if size_terms and not np.all(np.isfinite(sizes_all) & (sizes_all > 0)):
        raise FitError(f"size terms {SIZE_FORM} need a positive size n for every run",
                       column="n")
    if size_terms and distinct.size < sizes_needed(fixed):
        raise _sizes_error(int(distinct.size), fixed)
    if not size_terms:
        fixed = {}
    feats, ys, row_sizes = [], [], []
    for c in cs:
        idx = _thin(c.fit_steps(from_step), max_points)
        if idx.size == 0:
            raise FitError(f"run {c.run!r}: no loss after the warm-up and step {from_step:g} "
                           "within its logged schedule", column="loss")
        feats.append(curve_features(law, c, c.steps[idx], c.window[idx]))
        ys.append(c.loss[idx])
        row_sizes.append(np.full(idx.size, c.n))
    y = np.concatenate(ys)
    # a fixed E of an additive law (g = 1) is taken off the losses; residuals stay relative to y
    offset = fixed.get("E", 0.0)
    sizes = np.concatenate(row_sizes) if size_terms else None
    free_a = size_terms and "a" not in fixed
    p = len(law.theta_names)
    lo = list(law.theta_bounds[0]) + ([SIZE_BOUNDS[0]] if free_a else [])
    hi = list(law.theta_bounds[1]) + ([SIZE_BOUNDS[1]] if free_a else [])
    grid = list(law.theta_grid) + ([SIZE_GRID] if free_a else [])
    k = len(_size_names(size_terms, fixed)) + len(law.coef_names)
    n_free = len(lo) + k
    if y.size <= n_free:
        raise FitError(f"{law.name}: {y.size} losses for {n_free} parameters", column="loss")

    def design(theta: np.ndarray) -> np.ndarray:
        return _design(law, feats, sizes, theta, fixed)

    model = VarproModel(design, theta_bounds=(lo, hi))
    fs_grid = CURVE_F_SCALES if f_scale == "auto" else None
    with np.errstate(all="ignore"):
        res = varpro_fit(model, y - offset, theta_grid=grid, sigma=y,
                         options=VarproOptions(f_scale=f_scale, f_scale_grid=fs_grid,
                                               n_refine=n_refine))

    def params_of(theta: np.ndarray, coef: np.ndarray) -> dict[str, float]:
        names = _size_names(size_terms, fixed) + law.coef_names
        fitted = dict(zip(names, map(float, coef), strict=True))
        out = {"E": fixed["E"]} if "E" in fixed else {}
        out.update(fitted)
        if size_terms:
            out["a"] = fixed["a"] if "a" in fixed else float(theta[p])
        out.update(law.named(theta[:p]))
        return out

    params = params_of(res.theta, res.coef)
    pred = y - res.residuals
    goodness = goodness_of_fit(y, pred, n_free)
    rel = np.abs(res.residuals) / y
    goodness.update(mean_rel_err=float(rel.mean()), worst_rel_err=float(rel.max()))
    meta: dict[str, Any] = {"f_scale": res.f_scale, "residuals": "relative: (loss − fit) / loss",
                            "max_points_per_run": int(max_points), "converged": res.success}
    warnings: list[str] = []
    if size_terms:
        meta["size_terms"] = {"form": SIZE_FORM, "fixed": dict(fixed),
                              "free": [n for n in ("E", "A_N", "a") if n not in fixed],
                              "n_sizes": int(distinct.size),
                              "assumption": size_assumption_text(fixed, int(distinct.size))}
        if "E" in fixed and fixed["E"] >= float(y.min()):
            warnings.append(f"the fixed E = {fixed['E']:g} is not below the lowest fitted loss "
                            f"{float(y.min()):.4g}: L0(N) = E + A_N·N^−a cannot fit these runs")
    names = list(law.theta_names) + (["a"] if free_a else [])
    for name, v, b_lo, b_hi in zip(names, res.theta, lo, hi, strict=True):
        if min(v - b_lo, b_hi - v) <= 1e-6 * max(1.0, b_hi - b_lo):
            warnings.append(f"{name} = {v:.4g} is at its bound [{b_lo:g}, {b_hi:g}]: the curves "
                            "do not identify it (a limit of the law fits them)")
    if not res.success:
        warnings.append(f"the robust polish did not report convergence: {res.message}")
    stderr = intervals = None
    if uncertainty.method == "perturbation" and uncertainty.n_refits > 0:
        def refit(y_new: np.ndarray) -> dict[str, float]:
            with np.errstate(all="ignore"):
                r = varpro_fit(model, y_new - offset, theta_grid=grid, theta0=res.theta,
                               sigma=y_new, options=VarproOptions(f_scale=res.f_scale))
            out = params_of(r.theta, r.coef)
            return {n: v for n, v in out.items() if n not in fixed}

        n_refits = int(uncertainty.n_refits)
        samples, failed = perturbation_samples(refit, y, n_refits=n_refits,
                                               sigma_rel=uncertainty.sigma_rel,
                                               seed=uncertainty.seed)
        stderr, intervals = summarize_samples(samples, level=uncertainty.level, estimate=params)
        meta["uncertainty"] = {"method": f"perturbation ({uncertainty.sigma_rel * 100:g} % of each "
                                         "loss, Fernandes fn. 5)",
                               "n_refits": n_refits, "failed": int(failed)}
        if failed:
            warnings.append(f"{failed} of {n_refits} perturbation refits failed")
    elif uncertainty.method not in (None, "none", "perturbation"):
        raise FitError(f"curve laws: uncertainty must be 'perturbation' or None, got "
                       f"{uncertainty.method!r}", column="uncertainty")
    limits = {"L_inf": params["E"] if size_terms else params["L0"]}
    if size_terms:
        for n in distinct:
            limits[f"L0(N={n:.6g})"] = float(params["E"] + params["A_N"] * n ** (-params["a"]))
    return {"params": params, "stderr": stderr, "intervals": intervals, "goodness": goodness,
            "n_points": int(y.size), "warnings": warnings, "meta": meta, "limits": limits,
            "runs": [c.run for c in cs], "size_terms": bool(size_terms),
            "size_fixed": dict(fixed), "from_step": float(from_step)}


def heldout_errors(fit: ScheduleLawFit, curve: Curve, from_step: float | None = None
                   ) -> dict[str, Any]:
    """The fit's prediction of a run it never saw, at every loss the laws describe
    (:meth:`Curve.fit_steps` with ``from_step``, default the fit's): ``mean`` and ``worst``
    |relative error|, ``last`` the signed relative error (predicted − measured)/measured at the
    last step, and ``steps``, ``predicted``, ``measured``."""
    start = fit.from_step if from_step is None else from_step
    mask = curve.fit_steps(start)
    if not mask.any():
        raise FitError(f"held-out run {curve.run!r}: no loss after the warm-up and step "
                       f"{start:g}", column="loss")
    steps, measured = curve.steps[mask], curve.loss[mask]
    n = curve.n if fit.size_terms else None
    pred = fit.predict(steps, curve.lr_steps, curve.lr, n=n, window=curve.window[mask])
    rel = (pred - measured) / measured
    return {"mean": float(np.mean(np.abs(rel))), "worst": float(np.max(np.abs(rel))),
            "last": float(rel[-1]), "steps": steps.tolist(), "predicted": pred.tolist(),
            "measured": measured.tolist()}
