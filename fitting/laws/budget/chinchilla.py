"""Chinchilla form L(N, D) = E + A/N^α + B/D^β (Caillaut et al. 2024 eq. 2; Hoffmann et al. 2022),
fitted as Hoffmann et al. and the Besiroglu et al. 2024 replication do: in log space,
log L ≈ LSE(a − α log N, b − β log D, e), Huber loss, L-BFGS from a grid of starts.

This module holds the public API: the result (:class:`ChinchillaFit`), the fit
(:func:`fit_chinchilla`: starts ``init`` = ``"auto"``, ``"grid"`` or ``"varpro"``, tied exponents,
bootstrap) with its diagnostics (goodness, backtest, start statistics) and the fit from a table.
The starts and the search: :mod:`fitting.laws.budget.chinchilla_search`; the vectorised L-BFGS
and polishing: :mod:`fitting.laws.budget.chinchilla_opt`; the robustness measures and the
published grid: docs/reference/laws.md, "Chinchilla form".
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fitting.core.base import FitError, FitResult, TableRequest, register_law
from fitting.core.options import BacktestOptions, grouped_options
from fitting.data.tables import (
    apply_column_map,
    check_finite_positive,
    drop_invalid_rows,
    require_columns,
)
from fitting.laws.budget.chinchilla_opt import huber_objective, refit_many, to_theta, unpack
from fitting.laws.budget.chinchilla_opt import multi_start as multi_start  # re-exported
from fitting.laws.budget.chinchilla_search import (
    AUTO_MIN_STARTS_AT_OPTIMUM,
    INITS,
    StartSearch,
    grid_starts,
    published_grid,
    search_starts,
)
from fitting.laws.table_fits import final_loss_table, fit_bootstrapped

__all__ = [
    "ChinchillaFit",
    "ChinchillaOptions",
    "fit_chinchilla",
    "fit_from_table",
    "published_grid",
    "grid_starts",
    "EPOCH_PUBLISHED",
    "INITS",
    "AUTO_MIN_STARTS_AT_OPTIMUM",
]

#: Besiroglu et al. 2024 (Epoch replication of Hoffmann et al. Approach 3), Huber fit and
#: bootstrap 95% intervals (4,000 resamples), as published (see benchmarks/data/README.md).
EPOCH_PUBLISHED: dict[str, Any] = {
    "params": {"E": 1.8172, "A": 477.8, "B": 2143.9, "alpha": 0.3473, "beta": 0.3672},
    "intervals": {
        "E": (1.769, 1.871),
        "A": (285.0, 744.0),
        "B": (1042.0, 5810.0),
        "alpha": (0.317, 0.373),
        "beta": (0.331, 0.415),
    },
}


def _check_inputs(n: Any, d: Any, loss: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    arrays = []
    for name, v in (("n", n), ("d", d), ("loss", loss)):
        try:
            a = np.asarray(v, dtype=float).ravel()
        except (TypeError, ValueError):
            raise FitError(f"{name}: expected numbers", column=name) from None
        arrays.append(a)
    lens = {len(a) for a in arrays}
    if len(lens) != 1:
        raise FitError(f"n, d, loss must have the same length, got {[len(a) for a in arrays]}")
    for name, a in zip(("n", "d", "loss"), arrays, strict=True):
        bad = ~np.isfinite(a) | (a <= 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise FitError(
                f"{name}, row {i}: expected a finite positive number, got {a[i]!r} "
                f"({int(bad.sum())} bad row(s))",
                column=name,
                row=i,
            )
    return arrays[0], arrays[1], arrays[2]


@register_law("chinchilla")
@dataclass
class ChinchillaFit(FitResult):
    """L(N, D) = E + A/N^α + B/D^β (Caillaut eq. 2). ``params``: E, A, B, alpha, beta."""

    delta: float = 1e-3
    tied_exponents: bool = False
    local_optima: list[dict[str, float]] = field(default_factory=list)
    bootstrap_params: list[list[float]] = field(default_factory=list)  # rows: E, A, B, α, β

    @classmethod
    def fit_table(cls, table: Any, request: TableRequest) -> ChinchillaFit:
        """``mnmt-fit fit --law chinchilla``: L(N, D) on a table of N, D (``tokens``) and loss,
        or on a tidy table's final losses with the ends of cool-down branches (each the loss
        at a smaller budget D, Hägele et al. 2024); bootstrap only."""
        df, pre_dropped = table, 0
        if "loss" not in df.columns and {"metric", "value"} <= set(df.columns):
            df, pre_dropped = final_loss_table(df, request, include_branches=True)
        return fit_bootstrapped(fit_from_table, "chinchilla", df, request, pre_dropped,
                                keywords=table_keywords)

    def predict(self, n: Any, d: Any) -> np.ndarray:  # type: ignore[override]
        """Predicted loss at model size(s) ``n`` and training tokens ``d`` (broadcast)."""
        p = self.params
        n = np.asarray(n, dtype=float)
        d = np.asarray(d, dtype=float)
        return p["E"] + p["A"] * n ** (-p["alpha"]) + p["B"] * d ** (-p["beta"])

    def predict_band(self, n: Any, d: Any, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Percentile band of the prediction over the bootstrap fits (needs ``bootstrap`` > 0)."""
        if not self.bootstrap_params:
            raise FitError("predict_band needs a fit with bootstrap > 0")
        s = np.asarray(self.bootstrap_params, dtype=float)
        n = np.asarray(n, dtype=float)[..., None]
        d = np.asarray(d, dtype=float)[..., None]
        preds = s[:, 0] + s[:, 1] * n ** (-s[:, 3]) + s[:, 2] * d ** (-s[:, 4])
        q = 100 * (1 - level) / 2
        return np.percentile(preds, q, axis=-1), np.percentile(preds, 100 - q, axis=-1)

    def summary(self) -> str:
        """Parameters and fit quality, then the multi-start and backtest diagnostics."""
        lines = [super().summary()]
        st = self.meta.get("start_stats")
        if st:
            lines.append(f"  starts: {st['n_reached_optimum']}/{st['n_starts']} "
                         f"({st['fraction_reached_optimum']:.1%}) reached the optimum")
        bt = self.meta.get("backtest")
        if bt:
            lines.append(f"  backtest without N={bt['held_out_n']:.4g}: RMSE log L "
                         f"{bt['rmse_log']:.4f} (noise {bt['noise_log']:.4f})")
        return "\n".join(lines)

    def compute_optimal(self, flops: Any) -> tuple[np.ndarray, np.ndarray]:
        """Loss-minimising (N, D) under C = 6 N D (Hoffmann et al. eq. 4): N ∝ C^{β/(α+β)}."""
        p = self.params
        a, b = p["alpha"], p["beta"]
        c = np.asarray(flops, dtype=float)
        g = (a * p["A"] / (b * p["B"])) ** (1.0 / (a + b))
        n_opt = g * (c / 6.0) ** (b / (a + b))
        return n_opt, c / (6.0 * n_opt)


def _goodness(theta: np.ndarray, x: np.ndarray, z: np.ndarray, y: np.ndarray, delta: float,
              loss: np.ndarray) -> dict[str, float]:
    a, b, e, al, be = unpack(theta)
    pred = np.exp(e) + np.exp(a - al * x) + np.exp(b - be * z)
    res_log = np.log(pred) - y
    ss_res = float(np.sum((loss - pred) ** 2))
    ss_tot = float(np.sum((loss - loss.mean()) ** 2))
    return {
        "huber_objective": float(huber_objective(theta[None, :], x, z, y, delta)[0]),
        "rmse": math.sqrt(ss_res / len(loss)),
        "rmse_log": float(np.sqrt(np.mean(res_log**2))),
        "mae_log": float(np.mean(np.abs(res_log))),
        "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else math.nan,
    }


def _params(theta: np.ndarray) -> dict[str, float]:
    a, b, e, al, be = (float(v) for v in unpack(theta))
    return {"E": _exp(e), "A": _exp(a), "B": _exp(b), "alpha": al, "beta": be}


def _exp(log_value: float) -> float:
    """exp of a log-space coefficient; inf (not OverflowError) past float range — a refit that
    ran off to A or B ≈ e^710 when the data do not pin that term."""
    return math.exp(log_value) if log_value < 709.0 else math.inf


#: The bootstrap refits resamples × seeds × points values at a time at most (memory bound).
BOOTSTRAP_CHUNK_ELEMS = 500_000


def _validate(n: np.ndarray, d: np.ndarray, loss: np.ndarray, delta: Any, tied: bool,
              init: str) -> None:
    if not (isinstance(delta, int | float) and delta > 0 and math.isfinite(delta)):
        raise FitError(f"delta: expected a positive number, got {delta!r}")
    if init not in INITS:
        raise FitError(f"init: expected one of {', '.join(map(repr, INITS))}, got {init!r}")
    k = 4 if tied else 5
    if len(loss) < k:
        raise FitError(
            f"law 'chinchilla' has {k} free parameters but only {len(loss)} points were given"
        )
    for name, v in (("n", n), ("d", d)):
        if len(np.unique(v)) < 2:
            raise FitError(f"{name}: all rows have the same value {v[0]:g}; the Chinchilla form "
                           f"needs at least 2 (better >= 3) distinct values of {name}",
                           column=name)


@dataclass(frozen=True)
class ChinchillaOptions:
    """How :func:`fit_chinchilla` fits: the Huber loss, the form and the starts (Hoffmann et al.
    2022 Approach 3; Besiroglu et al. 2024).

    Attributes:
      delta: the Huber threshold on log-loss residuals.
      tied_exponents: α = β (four parameters).
      init: ``"auto"``, ``"grid"`` or ``"varpro"``: how the starts are chosen
        (:func:`fit_chinchilla`).
      grid: a mapping of start values per parameter (keys a, b, e, alpha[, beta]; log-space
        a = log A, …) or an (S, 5|4) array of starts; ``None``: :func:`published_grid`.
      n_polish: distinct best end points polished to full convergence.
      optimum_rtol: a start "reached the optimum" when its objective is within this relative
        tolerance of the best.
    """

    delta: float = 1e-3
    tied_exponents: bool = False
    init: str = "auto"
    grid: Mapping[str, Sequence[float]] | np.ndarray | None = None
    n_polish: int = 8
    optimum_rtol: float = 1e-6


def fit_chinchilla(
    n: Any,
    d: Any,
    loss: Any,
    *,
    options: ChinchillaOptions = ChinchillaOptions(),
    bootstrap: int = 0,
    seed: int = 0,
    backtest: BacktestOptions | None = BacktestOptions(),
) -> ChinchillaFit:
    """Fit L(N, D) = E + A/N^α + B/D^β (Caillaut et al. 2024 eq. 2; Hoffmann et al. 2022) to
    (n, d, loss): Huber loss on log L, log-space parameters, L-BFGS from a grid of starts.

    ``options``: the Huber threshold, tied exponents and the starts (:class:`ChinchillaOptions`).
    ``bootstrap``: number of row-resampling refits (seeded by ``seed``) for 95% percentile
    intervals and standard errors.

    ``options.init`` chooses the starts (``meta["init"]`` records the path that ran; under
    ``"auto"``, ``meta["init_reason"]`` says why the grid ran ("" when it did not) and
    ``meta["init_check"]`` holds the two checks' values):

    - ``"grid"``: L-BFGS from every grid point as given (the published procedure of Hoffmann et
      al. and Besiroglu et al.; 4,500 starts by default).
    - ``"varpro"``: the grid's distinct exponent pairs only, each with E, A, B solved exactly by
      non-negative least squares in linear space (variable projection) before L-BFGS — 25
      starts by default, each far closer to an optimum.
    - ``"auto"`` (default): ``"varpro"``, and the grid as well (its end points pooled with the
      variable-projection ones, the best optimum returned; path ``"varpro+grid"``) when the
      variable-projection optimum is not trusted alone: fewer than
      :data:`AUTO_MIN_STARTS_AT_OPTIMUM` (2) of its starts ended at it, or the cheap lattice
      check (:func:`~fitting.laws.budget.chinchilla_opt.profile_check`: the objective at
      variable-projection coefficients on a 21-value lattice of each exponent) found a lower
      objective. Only the grid runs (path ``"grid"``) when ``grid`` is an array of starts (they
      are the user's explicit starts) or variable projection gives non-finite starts.

    ``backtest``: refit without the largest model size (varpro starts) and predict it
    (Caillaut §4.1); warns when the held-out RMSE of log L exceeds ``backtest.tolerance`` × the
    noise level (``backtest.noise_level``, in log-loss units, default the fit's own RMSE of
    log L); ``None``: no backtest.
    """
    o = options
    n, d, loss = _check_inputs(n, d, loss)
    _validate(n, d, loss, o.delta, o.tied_exponents, o.init)
    logs = (np.log(n), np.log(d), np.log(loss))
    t0 = time.perf_counter()
    s = search_starts(o.init, o.grid, (n, d, loss), logs, float(o.delta), o.tied_exponents,
                      o.n_polish, o.optimum_rtol)
    t_total = time.perf_counter() - t0
    theta = to_theta(s.best[1], o.tied_exponents)
    params = _params(theta)
    fit = ChinchillaFit(
        law="chinchilla",
        params=params,
        goodness=_goodness(theta, *logs, o.delta, loss),
        n_points=len(loss),
        warnings=_warnings(n, d, params),
        meta=_meta(o.init, s, o.optimum_rtol, t_total),
        delta=float(o.delta),
        tied_exponents=bool(o.tied_exponents),
        local_optima=_local_optima(s.polished, o.tied_exponents)[:5],
    )
    if backtest is not None:
        _backtest(fit, n, d, loss, o.grid, backtest.noise_level, backtest.tolerance)
    if bootstrap:
        _bootstrap(fit, *logs, [th for _, th in s.polished[:3]], int(bootstrap), seed)
    return fit


def _meta(init: str, s: StartSearch, rtol: float, t_total: float) -> dict[str, Any]:
    reached = s.n_reached(rtol)
    meta: dict[str, Any] = {
        "equation": "Caillaut et al. 2024 eq. 2; Hoffmann et al. 2022 (LSE/Huber/L-BFGS)",
        "init": s.path,
        "start_stats": {
            "n_starts": int(s.n_starts),
            "n_reached_optimum": reached,
            "fraction_reached_optimum": reached / s.n_starts,
            "optimum_rtol": rtol,
            "init": init,
        },
        "timing_s": {"grid": s.seconds_starts, "total": t_total},
    }
    if init == "auto":
        meta["init_reason"] = s.reason
        meta["init_check"] = s.check
    return meta


def _local_optima(polished: list[tuple[float, np.ndarray]], tied: bool) -> list[dict[str, float]]:
    local: list[dict[str, float]] = []
    for f, th in polished:
        if not local or all(abs(f - lo["objective"]) > 1e-9 * max(f, 1e-12) for lo in local):
            local.append({"objective": float(f), **_params(to_theta(th, tied))})
    return local


def _warnings(n: np.ndarray, d: np.ndarray, params: dict[str, float]) -> list[str]:
    warnings: list[str] = []
    few = [k for k, v in (("n", n), ("d", d)) if len(np.unique(v)) < 3]
    if few:
        warnings.append(f"fewer than 3 distinct values of {' and '.join(few)}: the exponents "
                        "are weakly identified")
    if params["alpha"] <= 0 or params["beta"] <= 0:
        warnings.append("a fitted exponent is not positive: the data do not show scaling in N or D")
    return warnings


def _backtest(fit: ChinchillaFit, n, d, loss, grid, noise_level, tolerance) -> None:
    """Leave-largest-N-out extrapolation check (Caillaut §4.1)."""
    held = n == n.max()
    k = 4 if fit.tied_exponents else 5
    if len(np.unique(n)) < 3 or (~held).sum() < k + 1:
        fit.meta["backtest_skipped"] = "needs >= 3 distinct model sizes and enough rows"
        return
    t0 = time.perf_counter()
    sub = fit_chinchilla(n[~held], d[~held], loss[~held],
                         options=ChinchillaOptions(delta=fit.delta,
                                                   tied_exponents=fit.tied_exponents, grid=grid,
                                                   init="varpro"), backtest=None)
    err = np.log(sub.predict(n[held], d[held])) - np.log(loss[held])
    # floor 1e-4 (0.01% of the loss) so that exact synthetic data do not warn on rounding
    noise = float(noise_level) if noise_level is not None else max(fit.goodness["rmse_log"], 1e-4)
    rmse = float(np.sqrt(np.mean(err**2)))
    fit.meta["backtest"] = {"held_out_n": float(n.max()), "held_out_rows": int(held.sum()),
                            "rmse_log": rmse, "mean_log_error": float(np.mean(err)),
                            "noise_log": noise, "seconds": time.perf_counter() - t0}
    if rmse > tolerance * noise:
        fit.warnings.append(
            f"extrapolation backtest: refitted without the largest model size ({n.max():.4g}), "
            f"the law predicts it with RMSE {rmse:.4f} in log loss (mean error "
            f"{np.mean(err):+.4f}), more than {tolerance:g}x the noise level {noise:.4f}")


def _bootstrap(fit: ChinchillaFit, x, z, y, seeds: list[np.ndarray], n_boot: int,
               seed: int) -> None:
    """Row-resampling bootstrap: 95% percentile intervals and standard deviations. Each resample
    is refitted by IRLS from the best full-data optima (``seeds``), all resamples of a chunk at
    once (:func:`~fitting.laws.budget.chinchilla_opt.refit_many`). A refit whose IRLS did not
    converge within its iterations, or whose A or B left float range, is counted
    (``meta["bootstrap"]["not_converged"]``, ``["non_finite"]``) and left out of the intervals,
    the sds and ``bootstrap_params``."""
    rng = np.random.default_rng(seed)
    names = ["E", "A", "B", "alpha", "beta"]
    samples = np.empty((n_boot, 5))
    conv = np.ones(n_boot, dtype=bool)
    t0 = time.perf_counter()
    idx = np.stack([rng.integers(0, len(y), len(y)) for _ in range(n_boot)])
    chunk = max(1, BOOTSTRAP_CHUNK_ELEMS // (len(seeds) * len(y)))  # bound memory
    for c in range(0, n_boot, chunk):
        i = idx[c:c + chunk]
        th = refit_many(np.array(seeds), x[i], z[i], y[i], fit.delta, fit.tied_exponents,
                        converged=conv[c:c + chunk])
        for b, row in enumerate(th, start=c):
            p = _params(to_theta(row, fit.tied_exponents))
            samples[b] = [p[k] for k in names]
    finite = np.isfinite(samples).all(axis=1)  # refits whose A or B left float range
    ok = finite & conv
    kept = samples[ok] if ok.sum() > 1 else np.full((2, 5), np.nan)
    fit.intervals = {
        k: (float(np.percentile(kept[:, i], 2.5)), float(np.percentile(kept[:, i], 97.5)))
        for i, k in enumerate(names)
    }
    fit.stderr = {k: float(np.std(kept[:, i], ddof=1)) for i, k in enumerate(names)}
    fit.meta["bootstrap"] = {"n": n_boot, "seed": seed, "seconds": time.perf_counter() - t0,
                             "non_finite": int((~finite).sum()),
                             "not_converged": int((~conv).sum())}
    if not finite.all():
        fit.warnings.append(f"{int((~finite).sum())} of {n_boot} bootstrap refits sent A or B "
                            "past float range (that term is not pinned by the data); the "
                            "intervals use the others")
    if not conv.all():
        fit.warnings.append(f"{int((~conv).sum())} of {n_boot} bootstrap refits did not converge "
                            "within their IRLS iterations; the intervals use the others")
    fit.bootstrap_params = samples[conv].tolist()


def table_keywords(flat: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`fit_from_table`'s keyword arguments from the flat names ``mnmt-fit fit --option``
    takes: :class:`ChinchillaOptions`' fields into ``options``, the backtest's names
    (:func:`~fitting.core.options.grouped_options`) into ``backtest``, the others as they are."""
    fields = {f.name for f in dataclasses.fields(ChinchillaOptions)}
    own = {k: v for k, v in flat.items() if k in fields}
    out = grouped_options({k: v for k, v in flat.items() if k not in fields},
                          groups=("backtest",))
    if own:
        out["options"] = ChinchillaOptions(**own)
    return out


def fit_from_table(
    df: Any,
    *,
    columns: str | Mapping[str, str] | None = None,
    drop_invalid: bool = False,
    source: str | None = None,
    options: ChinchillaOptions = ChinchillaOptions(),
    bootstrap: int = 0,
    seed: int = 0,
    backtest: BacktestOptions | None = BacktestOptions(),
) -> ChinchillaFit:
    """Fit the Chinchilla form to a table with columns ``n`` (parameters), ``d`` (training
    tokens) and ``loss``. ``columns`` maps other names (``{"n": "params", "d": "tokens"}`` or
    ``"n=params,d=tokens"``). ``drop_invalid`` drops rows with missing/non-positive values and
    reports the count in the warnings; otherwise such a row raises naming column and row.
    ``options``, ``bootstrap``, ``seed`` and ``backtest`` are :func:`fit_chinchilla`'s.
    """
    df = apply_column_map(df, columns, source)
    require_columns(df, ["n", "d", "loss"], source)
    dropped = 0
    if drop_invalid:
        df, dropped = drop_invalid_rows(df, ["n", "d", "loss"], positive=["n", "d", "loss"])
    n = check_finite_positive(df, "n", source)
    d = check_finite_positive(df, "d", source)
    loss = check_finite_positive(df, "loss", source)
    fit = fit_chinchilla(n, d, loss, options=options, bootstrap=bootstrap, seed=seed,
                         backtest=backtest)
    if dropped:
        fit.warnings.append(f"dropped {dropped} invalid row(s) (drop_invalid=True)")
        fit.meta["dropped_rows"] = dropped
    return fit
