"""Quality laws: translation-quality metrics as functions of cross-entropy.

* ``form="power"``: BLEU = c·L^−p (Ghorbani et al. 2021 eq. 5), fitted as the line
  log BLEU = log c − p·log L with soft_l1 (f_scale grid in relative units);
* ``form="linear"``: metric = a + b·L, the near-linear ChrF/BLEURT–loss relation of Fernandes
  et al. 2023 Fig. 8 / Fig. 19, fitted with soft_l1 on the metric standardised by its spread.

A fitted quality law maps predicted losses to the metric, so frontiers can be drawn in BLEU or
ChrF (``metric_map`` of :mod:`fitting.laws.size.frontier`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from fitting.core.base import FitError, FitResult, TableRequest, register_law
from fitting.core.engine import EngineResult, convergence_warning, goodness_of_fit, robust_fit
from fitting.core.options import FitOptions, UncertaintyOptions
from fitting.core.uncertainty import perturbation_samples, summarize_samples
from fitting.data.tables import check_numeric, drop_invalid_rows, require_columns, without_branches
from fitting.laws.size.power import as_positive_array

__all__ = ["QualityLawFit", "fit_quality_law", "quality_points", "METRIC_RANGES"]

#: metrics with a bounded scale (sacrebleu's BLEU and ChrF, 0–100): predictions are clipped to it,
#: as a law extrapolated to a low loss can otherwise promise a ChrF above 100
METRIC_RANGES: dict[str, tuple[float, float]] = {"bleu": (0.0, 100.0), "chrf": (0.0, 100.0)}


@register_law("quality")
@dataclass
class QualityLawFit(FitResult):
    """Metric as a function of loss. ``power``: params ``c``, ``p``; ``linear``: ``a``, ``b``.

    ``meta["converged"]``: whether the robust fit converged (:func:`fitting.core.engine.converged`;
    False comes with a warning); ``meta["refits_failed"]``: refits that failed, those that did not
    converge included, left out of ``stderr`` and ``intervals``.
    """

    form: str = "power"
    metric: str = "bleu"

    @classmethod
    def fit_table(cls, table: pd.DataFrame, request: TableRequest) -> QualityLawFit:
        """``mnmt-fit fit --law quality``: ``request.quality_metric`` against cross-entropy
        (Ghorbani eq. 5; form ``request.form``, power by default), from a user table's own
        ``loss`` and metric columns or the tidy table's final rows."""
        m, df, src = request.quality_metric, table, request.source
        if "metric" not in df.columns:  # a user table: its own loss and metric columns
            require_columns(df, ["loss", m], src)
        if not ({"loss", m} <= set(df.columns)):
            df = quality_points(without_branches(df), m, eval_set=request.eval_set,
                                pair=request.pair)
        elif request.pair is not None and "pair" in df.columns:
            df = df[df["pair"] == request.pair]
        if request.drop_invalid:
            df, _ = drop_invalid_rows(df, ["loss", m], positive=["loss"])
        return fit_quality_law(check_numeric(df, "loss", src), check_numeric(df, m, src),
                               form=request.form or "power", metric=m,
                               **request.fit_options())

    def predict(self, loss: ArrayLike) -> np.ndarray:
        """Metric value at cross-entropy ``loss``, within the metric's range
        (:data:`METRIC_RANGES`) where it has one."""
        L = np.asarray(loss, dtype=np.float64)
        q = self.params
        if self.form == "power":
            value = q["c"] * np.power(L, -q["p"])
        else:
            value = q["a"] + q["b"] * L
        bounds = METRIC_RANGES.get(str(self.metric).lower())
        return np.clip(value, *bounds) if bounds else value

    def inverse(self, value: ArrayLike) -> np.ndarray:
        """Loss needed to reach a metric value."""
        v = np.asarray(value, dtype=np.float64)
        q = self.params
        if self.form == "power":
            return np.power(v / q["c"], -1.0 / q["p"])
        if q["b"] == 0:
            raise FitError("flat linear quality law has no inverse")
        return (v - q["a"]) / q["b"]


def fit_quality_law(
    loss: Sequence[float] | np.ndarray,
    value: Sequence[float] | np.ndarray,
    *,
    form: str = "power",
    metric: str = "bleu",
    fit_options: FitOptions = FitOptions(),
    uncertainty: UncertaintyOptions = UncertaintyOptions(),
) -> QualityLawFit:
    """Fit BLEU = c·L^−p (eq. 5, ``form="power"``) or metric = a + b·L (``"linear"``).

    Uncertainty: refits with σ = ``uncertainty.sigma_rel`` × value Gaussian perturbations of the
    metric (``method`` ``"perturbation"`` or ``None``).
    """
    L = as_positive_array(loss, "loss")
    if form == "power":
        v = as_positive_array(value, metric)
    elif form == "linear":
        v = np.asarray(value, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(v)):
            i = int(np.flatnonzero(~np.isfinite(v))[0])
            raise FitError(f"column {metric!r}, row {i}: expected a finite number, got {v[i]!r}",
                           column=metric, row=i)
    else:
        raise FitError(f"form must be 'power' or 'linear', got {form!r}")
    if L.size != v.size:
        raise FitError(f"'loss' has {L.size} values but {metric!r} has {v.size}")
    if L.size < 3 or np.unique(L).size < 2:
        raise FitError(f"quality law needs ≥ 3 points with distinct losses, got {L.size}")

    def fit(vv: np.ndarray, fs: float | str,
            refit: bool = False) -> tuple[dict[str, float], EngineResult]:
        """Robust line fit; returns the parameters and the engine's result (FitError for a
        ``refit`` that did not converge)."""
        if form == "power":
            x, yy = np.log(L), np.log(vv)
            b, a = np.polyfit(x, yy, 1)
            res = robust_fit(lambda t: t[0] - t[1] * x, yy, [[a, -b]],
                             ([-np.inf, -np.inf], [np.inf, np.inf]), loss=fit_options.robust_loss,
                             f_scale=fs, require_convergence=refit)
            return {"c": float(np.exp(res.theta[0])), "p": float(res.theta[1])}, res
        sd = float(np.std(vv)) or 1.0
        b, a = np.polyfit(L, vv, 1)
        res = robust_fit(lambda t: (t[0] + t[1] * L) / sd, vv / sd, [[a, b]],
                         ([-np.inf, -np.inf], [np.inf,
                                               np.inf]), loss=fit_options.robust_loss, f_scale=fs,
                         require_convergence=refit)
        return {"a": float(res.theta[0]), "b": float(res.theta[1])}, res

    q, main = fit(v, fit_options.f_scale)
    chosen = main.f_scale
    out = QualityLawFit(law="quality", params=q, form=form, metric=metric, n_points=int(L.size))
    out.goodness = {**goodness_of_fit(v, out.predict(L), 2), "f_scale": chosen}
    out.meta = {"robust_loss": fit_options.robust_loss, "uncertainty": uncertainty.method,
                "n_refits": uncertainty.n_refits, "sigma_rel": uncertainty.sigma_rel,
                "seed": uncertainty.seed, "converged": main.success}
    if (w := convergence_warning(main, "quality law fit")):
        out.warnings.append(w)
    if form == "power" and q["p"] <= 0:
        out.warnings.append(f"{metric} does not fall as the loss grows (p = {q['p']:.3g} ≤ 0); "
                            "Ghorbani eq. 5 assumes p > 0 (cf. source-original test sets)")
    if uncertainty.method in ("perturbation", "both"):
        # refits reuse the f_scale chosen on the data
        s, failed = perturbation_samples(lambda vv: fit(vv, chosen, True)[0], v,
                                         n_refits=uncertainty.n_refits,
                                         sigma_rel=uncertainty.sigma_rel, seed=uncertainty.seed)
        out.stderr, out.intervals = summarize_samples(s, uncertainty.level, estimate=q)
        out.meta["refits_failed"] = failed
    elif uncertainty.method not in (None, "none"):
        raise FitError("quality laws support uncertainty='perturbation' or None, "
                       f"got {uncertainty.method!r}")
    return out


def quality_points(
    table: pd.DataFrame,
    metric: str,
    *,
    eval_set: str = "validation",
    pair: str | None = None,
    final_only: bool = False,
) -> pd.DataFrame:
    """Pair each (run, pair, step) loss with the quality metric measured at the same step.

    Returns columns run_id, pair, step, loss, ``metric`` (tidy-table input). Steps where only
    one of the two was measured are not paired (they carry no (loss, metric) point).
    """
    require_columns(table, ["run_id", "pair", "eval_set", "metric", "step", "value"], "table")
    t = table[table["eval_set"] == eval_set]
    if pair is not None:
        t = t[t["pair"] == pair]
    if final_only and "final" in t.columns:
        t = t[t["final"].astype(bool)]
    keys = ["run_id", "pair", "step"]
    lo = t[t["metric"] == "loss"][keys + ["value"]].rename(columns={"value": "loss"})
    mv = t[t["metric"] == metric][keys + ["value"]].rename(columns={"value": metric})
    if mv.empty:
        have = sorted(t["metric"].astype(str).unique())
        raise FitError(f"no rows with metric={metric!r} in eval_set={eval_set!r}; metrics: {have}",
                       column="metric")
    out = lo.merge(mv, on=keys, how="inner")
    if out.empty:
        raise FitError(f"no step has both 'loss' and {metric!r} measured", column="step")
    check_numeric(out, metric, "table")
    return out.reset_index(drop=True)
