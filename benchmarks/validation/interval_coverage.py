"""Do the predictive intervals of L(N, D) hold the truth as often as they claim? Coverage on
public tables nobody here fitted.

For each public L(N, D) table (Epoch's replication of Hoffmann et al., Besiroglu et al. 2024;
the single-epoch runs of Muennighoff et al. 2023's data-constrained study), sizes are grouped
(model sizes within 3 % of each other are one size: the Epoch values are read off a figure),
then leave-largest-size-out is repeated down the ladder: for each of the largest sizes k whose
smaller sizes number at least ``--min-fitted`` (≥ 4: three for the inner backtest, one to
predict), L(N, D) = E + A/N^α + B/D^β (Caillaut eq. 2; `fit_chinchilla`, variable-projection
starts) is fitted on the sizes below k and predicts every point of size k. Each prediction
gets two intervals:

* **after** (`fitting.intervals.predictive`): s² = s_resample² + s_extrapolation² — refits on the
  runs resampled within each size (``--resamples``), and the calibration term: the RMS log
  error of the inner backtest (the sizes below k − 1 predicting size k − 1, data the fit had),
  grown linearly with the distance in log N. No seed noise is published for these tables (the
  inner backtest's error carries the point noise of size k − 1).
* **before**: the report's old ±, the sd over refits with 1 % perturbed losses (Fernandes
  footnote 5; ``--perturbations``), as ±1.2816 / ±1.9600 sd.

Printed: per table and pooled, the fraction of held-out points inside the nominal 80 % and 95 %
intervals with a Clopper–Pearson 90 % interval on it (target 70–90 % / 88–99 %).

    nice python benchmarks/validation/interval_coverage.py --json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root (run or loaded by path)

from benchmarks.common import SHARED_DATA as SHARED  # noqa: E402
from benchmarks.common import machine  # noqa: E402
from benchmarks.validation.validate_chinchilla import load_epoch  # noqa: E402
from fitting.core.base import FitError  # noqa: E402
from fitting.intervals.predictive import (  # noqa: E402
    IntervalTerm,
    PredictiveInterval,
    coverage,
    extrapolation_sd,
    predictive_interval,
    resampled_predictions,
    stratified_resamples,
)
from fitting.laws.budget.chinchilla import ChinchillaOptions, fit_chinchilla  # noqa: E402

SIZE_TOLERANCE = 0.03


def tables() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(n, d, loss) of each public L(N, D) table found under ../shared/data."""
    out = {}
    epoch = SHARED / "epoch_chinchilla" / "svg_extracted_data.csv"
    if epoch.exists():  # Besiroglu et al.'s procedure: the 5 highest losses dropped
        out["epoch_chinchilla"] = load_epoch(epoch)
    blations = SHARED / "datablations" / "data_constrained_val_losses.csv"
    if blations.exists():  # single-epoch runs only: repeated data is another law
        df = pd.read_csv(blations)
        df = df[df["unique_tokens"] >= df["tokens"]]
        out["datablations_single_epoch"] = (df["params"].to_numpy(float),
                                            df["tokens"].to_numpy(float),
                                            df["val_loss"].to_numpy(float))
    return out


def size_bins(n: np.ndarray) -> np.ndarray:
    """A size index per point: sorted sizes within SIZE_TOLERANCE of the previous one share it."""
    uniq = np.unique(n)
    label, labels = 0, {uniq[0]: 0}
    for a, b in zip(uniq[:-1], uniq[1:], strict=True):
        if b / a - 1 > SIZE_TOLERANCE:
            label += 1
        labels[b] = label
    return np.array([labels[v] for v in n])


def _fit(n, d, y):
    return fit_chinchilla(n, d, y, options=ChinchillaOptions(init="varpro"), backtest=None)


def _log_rmse(fit, n, d, y) -> float:
    return float(np.sqrt(np.mean(np.log(fit.predict(n, d) / y) ** 2)))


def leave_size_out(n, d, y, bins, k: int, resamples: int, perturbations: int, seed: int
                   ) -> list[dict]:
    """Size k predicted from the sizes below it: one record per point of size k."""
    fit_rows = np.flatnonzero(bins < k)
    inner_rows = np.flatnonzero(bins < k - 1)
    step_rows = np.flatnonzero(bins == k - 1)
    target = np.flatnonzero(bins == k)
    main = _fit(n[fit_rows], d[fit_rows], y[fit_rows])
    inner = _fit(n[inner_rows], d[inner_rows], y[inner_rows])
    step_error = _log_rmse(inner, n[step_rows], d[step_rows], y[step_rows])
    step_distance = math.log(np.median(n[step_rows]) / n[inner_rows].max())
    n_max = n[fit_rows].max()

    def refit(idx):
        rows = fit_rows[idx]
        return _fit(n[rows], d[rows], y[rows]).predict(n[target], d[target])

    boot, failed = resampled_predictions(
        refit, stratified_resamples(bins[fit_rows], resamples, seed))
    rng = np.random.default_rng(seed + 1)
    pert = []
    for _ in range(perturbations):
        yy = y[fit_rows] * (1 + 0.01 * rng.standard_normal(len(fit_rows)))
        try:
            pert.append(_fit(n[fit_rows], d[fit_rows], yy).predict(n[target], d[target]))
        except FitError:
            continue
    pert = np.log(np.vstack(pert))
    out = []
    for j, i in enumerate(target):
        est = float(main.predict(n[i], d[i]))
        dist = math.log(n[i] / n_max)
        cal = IntervalTerm(sd=extrapolation_sd(step_error, step_distance, dist))
        iv = predictive_interval(est, resampled=boot[:, j] if boot.size else (), n_failed=failed,
                                 calibration=cal)
        s_old = float(np.std(pert[:, j], ddof=1))
        old = predictive_interval(est, resampled=est * np.exp(pert[:, j] - pert[:, j].mean()))
        out.append({"size_index": k, "n": float(n[i]), "d": float(d[i]), "measured": float(y[i]),
                    "error": est / y[i] - 1, "after": iv, "before": old, "sd_perturbation": s_old,
                    "step_error": step_error, "distance_steps": dist / step_distance})
    return out


def run_table(name, n, d, y, args) -> dict:
    bins = size_bins(n)
    top = int(bins.max())
    ks = [k for k in range(top, 0, -1) if k >= args.min_fitted][: args.max_targets]
    records, t0 = [], time.perf_counter()
    for k in ks:
        try:
            recs = leave_size_out(n, d, y, bins, k, args.resamples, args.perturbations, args.seed)
        except FitError as e:
            print(f"  {name}: size {k} skipped ({e})", file=sys.stderr)
            continue
        records += recs
        print(f"  {name}: size {k} (N ≈ {np.median(n[bins == k]):.3g}, {len(recs)} points, "
              f"{time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return {"sizes": top + 1, "targets": ks, "records": records,
            "after": coverage((r["after"], r["measured"]) for r in records),
            "before": coverage((r["before"], r["measured"]) for r in records),
            "median_abs_error": float(np.median([abs(r["error"]) for r in records]))
            if records else None, "seconds": time.perf_counter() - t0}


def _line(name: str, res: dict) -> str:
    a, b = res["after"], res["before"]

    def cell(c):
        if c["fraction"] is None:
            return "–"
        return f"{c['fraction']:.0%} ({c['inside']}/{c['n']}; 90 % CI {c['ci90'][0]:.0%}–{c['ci90'][1]:.0%})"
    return (f"| {name} | {a['0.80']['n']} | {cell(b['0.80'])} | {cell(b['0.95'])} | "
            f"{cell(a['0.80'])} | {cell(a['0.95'])} |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--resamples", type=int, default=40)
    p.add_argument("--perturbations", type=int, default=20)
    p.add_argument("--min-fitted", type=int, default=4,
                   help="fewest sizes below a held-out size (inner backtest needs 3)")
    p.add_argument("--max-targets", type=int, default=8, help="largest sizes held out, each once")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    results = {name: run_table(name, *arrays, args) for name, arrays in tables().items()}
    pooled = [r for res in results.values() for r in res["records"]]
    results["pooled"] = {"after": coverage((r["after"], r["measured"]) for r in pooled),
                         "before": coverage((r["before"], r["measured"]) for r in pooled)}
    print("| table | points | before 80 % | before 95 % | after 80 % | after 95 % |")
    print("|---|---|---|---|---|---|")
    for name, res in results.items():
        print(_line(name, res))
    if args.json:
        def plain(o):
            if isinstance(o, PredictiveInterval):
                return o.to_dict()
            raise TypeError(type(o))
        print(json.dumps({"machine": machine(), "args": vars(args), "results": results},
                         default=plain))
    return 0


if __name__ == "__main__":
    sys.exit(main())
