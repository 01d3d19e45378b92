"""Validation 4: data-scaling extrapolation on Bansal et al. 2022's NMT curves.

Data: Alabdulmohsin et al. 2022's benchmark subset (revisiting_neural_scaling_laws): five NMT
architectures, loss (log-perplexity) against training-set size D; rows with Training = 1 are
for fitting, the Training = 0 row (the largest D) is held out.

Per architecture we fit L(D) = E + B·D^−β (our power law with N replaced by D; soft_l1, f_scale
grid, 1% perturbation uncertainty) on the Training = 1 rows, predict the held-out row, and report
its error and the RMSE of log(pred/true) over architectures (their metric). The fit's
leave-largest-size-out backtest on the training rows (Caillaut et al. 2024 §4.1) should warn
where the held-out extrapolation is off by more than the noise level; we report whether it did.

Usage (from the repository root):
    python benchmarks/validation/validate_revisiting.py [--data DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root (run or loaded by path)

from benchmarks.common import DATA  # noqa: E402  (vendored public data: benchmarks/data/README.md)
from fitting.core.options import BacktestOptions, UncertaintyOptions
from fitting.laws.size.power import fit_power_law  # noqa: E402


def run(data_dir: str, tolerance: float, n_refits: int) -> dict:
    df = pd.read_csv(os.path.join(data_dir, "benchmark.lang.NMT_subset.csv"))
    models = {}
    logs = []
    t0 = time.perf_counter()
    for model, g in df.groupby("Model", sort=False):
        tr = g[g.Training == 1].sort_values("Seen Examples")
        te = g[g.Training == 0]
        fit = fit_power_law(tr["Seen Examples"], tr["Loss"], x_name="d",
                            uncertainty=UncertaintyOptions(n_refits=n_refits),
                            backtest=BacktestOptions(tolerance=tolerance))
        pred = float(fit.predict(te["Seen Examples"].to_numpy(float))[0])
        true = float(te["Loss"].iloc[0])
        lo, hi = fit.band(te["Seen Examples"].to_numpy(float))
        warned = any("extrapolation backtest" in w for w in fit.warnings)
        noise = fit.backtest["noise"] if fit.backtest else float("nan")
        err = pred - true
        logs.append(np.log(pred / true))
        models[model] = {
            "n_train": int(len(tr)), "held_out_d": float(te["Seen Examples"].iloc[0]),
            "E": fit["l_inf"], "B": fit["beta"], "beta": fit["alpha"],
            "E_sd": (fit.stderr or {}).get("l_inf"),
            "pred": pred, "true": true, "error": err, "rel_error": err / true,
            "band95": [float(lo[0]), float(hi[0])], "true_in_band": bool(lo[0] <= true <= hi[0]),
            "backtest_error": None if not fit.backtest else fit.backtest["error"],
            "noise": noise, "warning_fired": warned,
            "held_out_beyond_noise": bool(abs(err) > tolerance * 0.01 * true),
        }
    elapsed = time.perf_counter() - t0
    agree = sum(m["warning_fired"] == m["held_out_beyond_noise"] for m in models.values())
    return {
        "rmse_log": float(np.sqrt(np.mean(np.square(logs)))),
        "tolerance": tolerance, "models": models,
        "warning_agrees_with_held_out": f"{agree}/{len(models)}",
        "seconds": elapsed, "machine": f"{platform.machine()} {os.cpu_count()} cpu",
        "loadavg": list(os.getloadavg()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DATA / "revisiting_neural_scaling_laws"),
                    help="folder holding benchmark.lang.NMT_subset.csv (vendored in "
                         "benchmarks/data/)")
    ap.add_argument("--tolerance", type=float, default=3.0,
                    help="warn when |backtest error| > tolerance × noise")
    ap.add_argument("--n-refits", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = run(a.data, a.tolerance, a.n_refits)
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print(f"{'model':16s} {'E':>7s} {'beta':>6s} {'pred':>7s} {'true':>7s} {'rel err':>8s} "
          f"{'in 95%':>6s} {'backtest':>9s} {'noise':>7s} {'warned':>6s} {'should':>6s}")
    for m, r in res["models"].items():
        bt = r["backtest_error"]
        print(f"{m:16s} {r['E']:7.4f} {r['beta']:6.3f} {r['pred']:7.4f} {r['true']:7.4f} "
              f"{100 * r['rel_error']:+7.2f}% {str(r['true_in_band']):>6s} "
              f"{(f'{bt:+.4f}' if bt is not None else '-'):>9s} {r['noise']:7.4f} "
              f"{str(r['warning_fired']):>6s} {str(r['held_out_beyond_noise']):>6s}")
    print(f"RMSE of log(pred/true) over held-out rows: {res['rmse_log']:.4f}")
    print(f"backtest warning agrees with the held-out outcome for "
          f"{res['warning_agrees_with_held_out']} models (tolerance {res['tolerance']:g}× noise)")
    print(f"{res['seconds']:.1f} s; {res['machine']}; load average {res['loadavg']}")


if __name__ == "__main__":
    main()
