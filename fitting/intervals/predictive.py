"""Predictive intervals: how far a prediction beyond the fitted runs may be off, and how often
such an interval held the truth.

The interval is ŷ·exp(±q·s), in log space s² = s_resample² + s_forms² + s_extrapolation² +
σ_seed² (rule "sum": refits on runs resampled within each size, the other forms' spread, the
calibration term fixed before any held-out point is read — :func:`extrapolation_sd` — and the
point's seed sd), or s² = s_calibration² + σ_seed² (rule "calibration": a calibration that is
itself the error of refits making the same prediction already holds their spread). q is
Student's t on the Welch–Satterthwaite dof of the terms that have one (:func:`interval_dof`),
else normal. ``calibrated``: a positive calibration term is in s; :func:`coverage` counts only
those, with Clopper–Pearson intervals (:func:`coverage_by_cluster`: per cluster too). The
derivation: docs/reference/laws.md, "Predictive intervals and their coverage".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

from fitting.core.base import FitError

__all__ = ["LEVELS", "IntervalTerm", "PredictiveInterval", "predictive_interval", "interval_dof",
           "quantile",
           "extrapolation_sd", "largest_size_step", "satterthwaite_dof", "stratified_resamples",
           "resampled_predictions", "coverage", "coverage_of_marks", "coverage_by_cluster",
           "coverage_text", "clopper_pearson", "UNINFORMATIVE_FACTOR", "band_factor",
           "informative"]

#: the nominal levels every interval is given at
LEVELS = (0.80, 0.95)
#: a 95 % band spanning more than this factor (hi95 / lo95; ×0.71 to ×1.41 about the estimate)
#: is "uninformative": an interval that wide is inside for almost any prediction
UNINFORMATIVE_FACTOR = 2.0


@dataclass(frozen=True)
class PredictiveInterval:
    """A prediction with its predictive interval (the module docstring).

    Fields: ``estimate`` ŷ; ``sd_resample``, ``sd_forms``, ``sd_extrapolation``, ``sigma_seed``
    the components (sd of log ŷ, i.e. relative); ``sd_total`` = sqrt of the sum of squares of
    all four (``rule`` "sum") or of ``sd_extrapolation`` and ``sigma_seed`` only (``rule``
    "calibration": the calibration error already holds the refits and the forms);
    ``lo80``/``hi80`` = ŷ·exp(∓q80·sd_total), ``lo95``/``hi95`` = ŷ·exp(∓q95·sd_total) with q
    the normal quantile (1.2816, 1.9600) where ``dof`` is None, else Student's t quantile with
    ``dof`` degrees of freedom (the Welch–Satterthwaite dof of the sum); ``n_resamples`` refits
    that converged, ``n_failed`` those that did not (never replaced by the estimate, out of
    ``sd_resample``); ``calibrated`` whether a positive calibration term is in the sum,
    ``calibration_n`` the count of errors it averaged (None: not given), ``seed_dof`` σ_seed's
    degrees of freedom (None: counted as known)."""

    estimate: float
    sd_resample: float
    sd_forms: float
    sd_extrapolation: float
    sigma_seed: float
    sd_total: float
    lo80: float
    hi80: float
    lo95: float
    hi95: float
    n_resamples: int = 0
    n_failed: int = 0
    rule: str = "sum"
    dof: float | None = None
    calibrated: bool = False
    calibration_n: float | None = None
    seed_dof: float | None = None

    def bounds(self, level: float) -> tuple[float, float]:
        """(low, high) at a level of :data:`LEVELS`."""
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {level}")
        return (self.lo80, self.hi80) if level == 0.80 else (self.lo95, self.hi95)

    def contains(self, value: float, level: float) -> bool:
        """Whether ``value`` lies inside the interval at ``level``."""
        lo, hi = self.bounds(level)
        return bool(lo <= value <= hi)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class IntervalTerm:
    """One measured term of a predictive interval: its relative sd (log scale; None: 0) and the
    dof it was estimated on (None: known, no dof of its own)."""

    sd: float | None = None
    dof: float | None = None


def predictive_interval(estimate: float, *, resampled: Sequence[float] = (),
                        form_estimates: Sequence[float] = (),
                        form_weights: Sequence[float] | None = None, n_failed: int = 0,
                        calibration: IntervalTerm = IntervalTerm(),
                        seed: IntervalTerm = IntervalTerm(),
                        rule: str = "sum") -> PredictiveInterval:
    """The predictive interval of ``estimate`` from its resampled refits' predictions, the
    other forms' predictions, the calibration term and the point's relative seed sd. s_forms is
    the root mean square of log(ŷ_form / ŷ) over the other forms, weighted by
    ``form_weights`` where given (default equal; a weight 0 leaves a form out).

    ``rule`` "sum" adds all four in quadrature; "calibration" (the module docstring) keeps the
    calibration term and the seed sd only — it falls back to "sum" where the calibration term
    is not a positive finite number. Under either, the quantiles are Student's t with the
    Welch–Satterthwaite dof of the terms kept (:func:`interval_dof`): ``calibration.dof`` the
    number of errors the calibration's RMS (``calibration.sd``) averaged, ``seed.dof`` σ_seed's
    (``seed.sd``; k − 1 for k seeds); None counts a term as known, and where every term is known
    the quantiles are normal. Raises FitError for a non-positive or non-finite estimate (the
    interval is built in log space) and ValueError for an unknown rule."""
    if not (math.isfinite(estimate) and estimate > 0):
        raise FitError(f"a predictive interval needs a positive finite estimate, got {estimate}")
    if rule not in ("sum", "calibration"):
        raise ValueError(f"rule must be 'sum' or 'calibration', got {rule!r}")
    res = np.asarray([v for v in resampled if math.isfinite(v) and v > 0], dtype=float)
    s_res = float(np.std(np.log(res), ddof=1)) if len(res) >= 2 else 0.0
    weights = [1.0] * len(form_estimates) if form_weights is None else list(form_weights)
    kept = [(float(v), float(w)) for v, w in zip(form_estimates, weights, strict=True)
            if math.isfinite(v) and v > 0 and math.isfinite(w) and w > 0]
    forms = np.asarray([v for v, _ in kept], dtype=float)
    wts = np.asarray([w for _, w in kept], dtype=float)
    s_forms = (float(np.sqrt(np.sum(wts * np.log(forms / estimate) ** 2) / np.sum(wts)))
               if len(forms) else 0.0)
    sigma_seed, seed_dof, calibration_dof = seed.sd, seed.dof, calibration.dof
    seed_sd = float(sigma_seed) if sigma_seed is not None and math.isfinite(sigma_seed) else 0.0
    cal = 0.0 if calibration.sd is None else float(calibration.sd)
    if rule == "calibration" and not (math.isfinite(cal) and cal > 0):
        rule = "sum"
    calibrated = math.isfinite(cal) and cal > 0
    if rule == "calibration":
        total = math.sqrt(cal ** 2 + seed_sd ** 2)
        known = []
    else:
        cal = cal if math.isfinite(cal) else 0.0
        total = math.sqrt(s_res ** 2 + s_forms ** 2 + cal ** 2 + seed_sd ** 2)
        known = [s_res, s_forms]
    dof = interval_dof(known, (cal, calibration_dof), (seed_sd, seed_dof))
    q80, q95 = (quantile(q, dof) for q in LEVELS)
    return PredictiveInterval(
        estimate=float(estimate), sd_resample=s_res, sd_forms=s_forms,
        sd_extrapolation=cal, sigma_seed=seed_sd, sd_total=total,
        lo80=estimate * math.exp(-q80 * total), hi80=estimate * math.exp(q80 * total),
        lo95=estimate * math.exp(-q95 * total), hi95=estimate * math.exp(q95 * total),
        n_resamples=int(len(res)), n_failed=int(n_failed), rule=rule, dof=dof,
        calibrated=bool(calibrated),
        calibration_n=None if calibration_dof is None else float(calibration_dof),
        seed_dof=None if seed_dof is None else float(seed_dof))


def interval_dof(known: Sequence[float], *estimated: tuple[float, float | None]
                 ) -> float | None:
    """The Welch–Satterthwaite dof (:func:`satterthwaite_dof`) of a sum of ``known`` sds and
    ``estimated`` (sd, dof) terms, a dof of None counted as known; None where the sum is known
    (normal quantiles)."""
    parts = [(float(s), math.inf) for s in known]
    parts += [(float(s), math.inf if v is None else float(v)) for s, v in estimated]
    dof = satterthwaite_dof(parts)
    return dof if math.isfinite(dof) else None


def quantile(level: float, dof: float | None) -> float:
    """The two-sided ``level`` quantile: Student's t on ``dof`` degrees of freedom, normal where
    ``dof`` is None (a known sd)."""
    p = 0.5 + level / 2
    return float(stats.norm.ppf(p) if dof is None else stats.t.ppf(p, dof))


def satterthwaite_dof(components: Iterable[tuple[float, float]]) -> float:
    """Welch–Satterthwaite degrees of freedom of a sum of variance estimates: for components
    (s_i, ν_i), ν = (Σ s_i²)² / Σ (s_i⁴ / ν_i); a component with ν_i = ∞ is a known variance
    (adds to the numerator only). ∞ where every component is known or all are zero."""
    parts = [(float(s) ** 2, float(v)) for s, v in components if math.isfinite(float(s))]
    num = sum(var for var, _ in parts) ** 2
    den = sum(var * var / v for var, v in parts if math.isfinite(v) and v > 0)
    return math.inf if den == 0 or num == 0 else num / den


def extrapolation_sd(step_error: float, step_distance: float, distance: float) -> float:
    """The calibration term: ``step_error`` (RMS log error of the inner backtest, which
    extrapolated ``step_distance`` in log N) grown linearly to ``distance`` (log N beyond the
    largest fitted size), never below one step's error. NaN inputs give NaN (no calibration
    available: the caller says so)."""
    if not (math.isfinite(step_error) and math.isfinite(step_distance) and step_distance > 0):
        return float("nan")
    return float(step_error) * max(1.0, float(distance) / float(step_distance))


def largest_size_step(sizes: Iterable[float]) -> tuple[float, float]:
    """(N_max, log(N_max / N_next)) of the distinct fitted sizes: the step a leave-largest-out
    backtest extrapolates, which :func:`extrapolation_sd` grows from; (N_max, NaN) with one
    size, (NaN, NaN) with none."""
    s = np.unique(np.asarray([float(v) for v in sizes], dtype=float))
    if s.size == 0:
        return float("nan"), float("nan")
    return float(s[-1]), (math.log(s[-1] / s[-2]) if s.size >= 2 else float("nan"))


def stratified_resamples(strata: Sequence[Any], n: int, seed: int = 0) -> list[np.ndarray]:
    """``n`` index arrays, each drawing with replacement within every stratum (e.g. the runs of
    each size) as many members as it has, so every stratum stays in every refit."""
    rng = np.random.default_rng(seed)
    labels = np.asarray(strata)
    groups = [np.flatnonzero(labels == s) for s in dict.fromkeys(labels.tolist())]
    return [np.concatenate([rng.choice(g, size=len(g), replace=True) for g in groups])
            for _ in range(int(n))]


def resampled_predictions(refit_predict: Callable[[np.ndarray], Sequence[float]],
                          resamples: Iterable[np.ndarray]) -> tuple[np.ndarray, int]:
    """``refit_predict(indices)`` → predictions of one refit, over every resample: the (R, P)
    array of the refits that succeeded and the number that failed (FitError, a numerical error,
    or a non-finite prediction); failed refits are counted and left out, never replaced."""
    rows, failed = [], 0
    for idx in resamples:
        try:
            pred = np.asarray(refit_predict(idx), dtype=float)
        except (FitError, ValueError, FloatingPointError, np.linalg.LinAlgError):
            failed += 1
            continue
        if not np.all(np.isfinite(pred)):
            failed += 1
            continue
        rows.append(pred)
    return (np.vstack(rows) if rows else np.empty((0, 0))), failed


def coverage(records: Iterable[tuple], *, calibrated_only: bool = False) -> dict[str, Any]:
    """How often the intervals held the measured value: per level of :data:`LEVELS`,
    ``inside`` (count), ``n``, ``fraction`` and ``ci90`` (Clopper–Pearson 90 % interval of the
    fraction); ``n`` = 0 gives fraction None. ``records``: (interval, measured) or (interval,
    measured, calibrated) — the third overrides the interval's own ``calibrated``. With
    ``calibrated_only`` (every coverage claim of the report) an uncalibrated interval is left
    out, counted per level in ``left_out``: its width was never checked on data."""
    kept, left = [], 0
    for rec in records:
        iv, y = rec[0], float(rec[1])
        if not math.isfinite(y):
            continue
        if calibrated_only and not (rec[2] if len(rec) > 2 else iv.calibrated):
            left += 1
            continue
        kept.append((iv, y))
    out = coverage_of_marks({level: [iv.contains(y, level) for iv, y in kept]
                             for level in LEVELS})
    if calibrated_only:
        for level in LEVELS:
            out[f"{level:.2f}"]["left_out"] = left
    return out


def coverage_of_marks(marks: dict[float, Sequence[bool]]) -> dict[str, Any]:
    """:func:`coverage` from inside/outside marks already made, {level: [inside?, ...]}."""
    out: dict[str, Any] = {}
    for level in LEVELS:
        hits = [bool(h) for h in marks.get(level, ())]
        k, n = sum(hits), len(hits)
        if n == 0:
            out[f"{level:.2f}"] = {"inside": 0, "n": 0, "fraction": None, "ci90": None}
            continue
        out[f"{level:.2f}"] = {"inside": int(k), "n": n, "fraction": k / n,
                               "ci90": list(clopper_pearson(k, n))}
    return out


def coverage_by_cluster(marks: dict[float, dict[Any, Sequence[bool]]]) -> dict[str, Any]:
    """Coverage of inside/outside marks that come in clusters ({level: {cluster: [inside?,
    ...]}}, e.g. a cluster per seed × pair: the points of one study's pair share its fit and its
    noise, so they are not independent): per level, :func:`coverage_of_marks`' fields over
    every point, ``clusters`` (how many) and ``ci90_clusters`` — the Clopper–Pearson interval
    with each cluster counted as one observation of the pooled fraction (k = fraction ·
    clusters of n = clusters: as wide as if the points of a cluster were one, the honest width
    when they move together); None without points."""
    flat = {level: [bool(h) for hits in by.values() for h in hits]
            for level, by in marks.items()}
    out = coverage_of_marks(flat)
    for level in LEVELS:
        by = {c: list(h) for c, h in (marks.get(level) or {}).items() if len(h)}
        row = out[f"{level:.2f}"]
        row["clusters"] = len(by)
        row["ci90_clusters"] = (None if not by else
                                list(clopper_pearson(row["fraction"] * len(by), len(by))))
    return out


def coverage_text(cov: dict[str, Any] | None, level: float) -> str:
    """"k/n (90 % CI a–b %)" of one level of a :func:`coverage` or :func:`coverage_by_cluster`
    result, with "; c clusters: a–b %" where clustered and "; m not calibrated, left out" where
    any was; "–" without points."""
    row = (cov or {}).get(f"{level:.2f}") or {}
    if not row.get("n"):
        return "–"
    lo, hi = row["ci90"]
    text = f"{row['inside']}/{row['n']} (90 % CI {100 * lo:.0f}–{100 * hi:.0f} %"
    if row.get("ci90_clusters"):
        clo, chi = row["ci90_clusters"]
        text += f"; {row['clusters']} clusters: {100 * clo:.0f}–{100 * chi:.0f} %"
    if row.get("left_out"):
        text += f"; {row['left_out']} not calibrated, left out"
    return text + ")"


def band_factor(iv: PredictiveInterval | dict[str, Any]) -> float:
    """hi95 / lo95 of an interval (or its :meth:`PredictiveInterval.to_dict`): how many times
    over its 95 % band spans, exp(2·q95·s)."""
    get = iv.get if isinstance(iv, dict) else lambda k: getattr(iv, k)
    return float(get("hi95")) / float(get("lo95"))


def informative(iv: PredictiveInterval | dict[str, Any]) -> bool:
    """Whether the 95 % band spans at most :data:`UNINFORMATIVE_FACTOR` (:func:`band_factor`):
    a band wider than that holds almost any prediction, so "inside" says little about it."""
    return band_factor(iv) <= UNINFORMATIVE_FACTOR


def clopper_pearson(k: float, n: float, level: float = 0.90) -> tuple[float, float]:
    """The exact (Clopper–Pearson) two-sided ``level`` interval of a fraction ``k`` of ``n``:
    the beta quantiles [B(α/2; k, n − k + 1), B(1 − α/2; k + 1, n − k)], 0 and 1 at the ends
    (a fractional k, an effective count, is read by the same beta quantiles). ValueError for
    n < 1 or k outside [0, n]."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"a fraction needs 0 ≤ k ≤ n and n ≥ 1, got k = {k}, n = {n}")
    tail = (1.0 - level) / 2.0
    lo = 0.0 if k == 0 else float(stats.beta.ppf(tail, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1.0 - tail, k + 1, n - k))
    return lo, hi
