"""Validate `fitting.laws.budget.chinchilla` against published fits, and time it against the PyPI `chinchilla`.

Validations 2 and 3, plus the Chinchilla speed comparison:

* Epoch (Besiroglu et al. 2024) data, their published procedure (drop the 5 highest losses;
  LSE/Huber δ=1e-3 in log space; L-BFGS from the 4,500-start grid): E, α, β within 1% and A, B
  within 5% of the published values; bootstrap 95% intervals overlapping the published ones.
* The same fit with the peer library `chinchilla` 0.2.0 (BFGS, log-Huber δ=1e-3 loss, same grid)
  in the same run: wall times, their ratio, and both sets of fitted values vs published.
* Datablations (Muennighoff et al. 2023) tied-exponent fit E=1.87, A=521, B=1488, α=β=0.3527:
  the notebook's procedure (tied, δ=1e-3, grid a,b ∈ linspace(0,25,5), e ∈ linspace(-1,1,4),
  α ∈ linspace(0,2,4)) on the CSV's rows and subsets.

The datablations CSV is vendored in benchmarks/data/ (Apache-2.0). The Epoch CSV is not (their
repository states no licence): benchmarks/data/README.md gives the command that downloads it
into benchmarks/data/epoch_chinchilla/; without it the Epoch part is skipped and said so.

Usage (from the repository root):
    nice python benchmarks/validation/validate_chinchilla.py [--json] [--bootstrap 1000] [--skip-peer]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root (run or loaded by path)

from benchmarks.common import DATA, machine  # noqa: E402  (public data: benchmarks/data/README.md)
from fitting.laws.budget.chinchilla import EPOCH_PUBLISHED, ChinchillaOptions, fit_chinchilla  # noqa: E402

DATABLATIONS_PUBLISHED = {"E": 1.87, "A": 521.0, "B": 1488.0, "alpha": 0.3527, "beta": 0.3527}
NAMES = ["E", "A", "B", "alpha", "beta"]
TOL = {"E": 0.01, "alpha": 0.01, "beta": 0.01, "A": 0.05, "B": 0.05}


def load_epoch(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    df = pd.read_csv(path)
    n = df["Model Size"].to_numpy(float)
    d = df["Training FLOP"].to_numpy(float) / (6 * n)
    loss = df["loss"].to_numpy(float)
    keep = np.sort(np.argsort(loss)[:-5])  # published procedure: drop the 5 highest losses
    return n[keep], d[keep], loss[keep]


def rel_err(params: dict, ref: dict) -> dict:
    return {k: params[k] / ref[k] - 1 for k in NAMES}


def run_ours(n, d, loss, bootstrap: int) -> dict:
    out: dict = {}
    t = time.perf_counter()
    # published grid, every start run; the backtest is timed separately (the peer has none)
    fit = fit_chinchilla(n, d, loss, options=ChinchillaOptions(init="grid"), backtest=None)
    out["wall_s"] = time.perf_counter() - t
    out["params"] = fit.params
    out["start_stats"] = fit.meta["start_stats"]
    out["local_optima"] = fit.local_optima
    t = time.perf_counter()
    fa = fit_chinchilla(n, d, loss, backtest=None)  # the default, init="auto"
    out["auto"] = {"wall_s": time.perf_counter() - t, "params": fa.params,
                   "path": fa.meta["init"], "init_reason": fa.meta["init_reason"],
                   "max_rel_diff_vs_grid": max(abs(fa.params[k] / fit.params[k] - 1)
                                               for k in NAMES)}
    t = time.perf_counter()
    fv = fit_chinchilla(n, d, loss, options=ChinchillaOptions(init="varpro"), backtest=None)
    out["varpro"] = {"wall_s": time.perf_counter() - t, "params": fv.params,
                     "start_stats": fv.meta["start_stats"]}
    g3 = {"a": [0.0, 12.5, 25.0], "b": [0.0, 12.5, 25.0], "e": [-1.0, 0.0, 1.0],
          "alpha": [0.0, 1.0, 2.0], "beta": [0.0, 1.0, 2.0]}
    out["grid_3x5"] = {}
    for init in ("grid", "varpro"):
        t = time.perf_counter()
        f3 = fit_chinchilla(n, d, loss, options=ChinchillaOptions(grid=g3, init=init),
                            backtest=None)
        out["grid_3x5"][init] = {"wall_s": time.perf_counter() - t, "params": f3.params,
                                 "start_stats": f3.meta["start_stats"]}
    fb = fit_chinchilla(n, d, loss, options=ChinchillaOptions(init="varpro"))
    out["backtest"] = {**fb.meta["backtest"], "warnings": fb.warnings}
    if bootstrap:
        t = time.perf_counter()
        fb = fit_chinchilla(n, d, loss, bootstrap=bootstrap, seed=0,
                            options=ChinchillaOptions(init="varpro"), backtest=None)
        out["bootstrap"] = {"n": bootstrap, "wall_s": time.perf_counter() - t,
                            "intervals": fb.intervals, "stderr": fb.stderr}
    return out


def run_peer(n, d, loss, parallel: bool) -> dict:
    from chinchilla import Chinchilla
    from chinchilla._metrics import log_huber

    grid = {"e": list(np.arange(-1, 1.01, 0.5)), "a": list(np.arange(0, 25.1, 5.0)),
            "b": list(np.arange(0, 25.1, 5.0)), "alpha": list(np.arange(0, 2.01, 0.5)),
            "beta": list(np.arange(0, 2.01, 0.5))}
    with tempfile.TemporaryDirectory() as td:
        cc = Chinchilla(project_dir=os.path.join(td, "peer"), param_grid=grid,
                        loss_fn=functools.partial(log_huber, delta=1e-3), log_level=40)
        for ni, di, li in zip(n, d, loss, strict=True):
            cc.append(N=float(ni), D=float(di), loss=float(li))
        t = time.perf_counter()
        cc.fit(parallel=parallel)
        wall = time.perf_counter() - t
        return {"wall_s": wall, "params": cc.params, "parallel": parallel,
                "processes": os.cpu_count() if parallel else 1, "n_starts": 6 * 6 * 5 * 5 * 5}


def run_datablations(path: Path) -> dict:
    df = pd.read_csv(path)
    grid = {"a": np.linspace(0, 25, 5), "b": np.linspace(0, 25, 5), "e": np.linspace(-1, 1, 4),
            "alpha": np.linspace(0, 2, 4)}
    subsets = {
        "all rows (296)": df,
        "single epoch (tokens <= unique_tokens)": df[df.tokens <= df.unique_tokens],
        "val_loss < 6 (drops diverged/tiny-data runs)": df[df.val_loss < 6],
        "at most 4 epochs": df[df.tokens <= 4 * df.unique_tokens],
    }
    out = {}
    for name, s in subsets.items():
        t = time.perf_counter()
        fit = fit_chinchilla(s.params, s.tokens, s.val_loss,
                             options=ChinchillaOptions(tied_exponents=True, grid=grid, init="grid"),
                             backtest=None)
        out[name] = {"rows": len(s), "wall_s": time.perf_counter() - t, "params": fit.params,
                     "rel_err_vs_published": rel_err(fit.params, DATABLATIONS_PUBLISHED),
                     "fraction_reached_optimum": fit.meta["start_stats"]
                     ["fraction_reached_optimum"]}
        t = time.perf_counter()
        fa = fit_chinchilla(s.params, s.tokens, s.val_loss,
                            options=ChinchillaOptions(tied_exponents=True, grid=grid),
                            backtest=None)  # the default, init="auto"
        out[name]["auto"] = {"wall_s": time.perf_counter() - t, "params": fa.params,
                             "path": fa.meta["init"],
                             "max_rel_diff_vs_grid": max(abs(fa.params[k] / fit.params[k] - 1)
                                                         for k in NAMES)}
    return out


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def run_epoch(args: argparse.Namespace, ap: argparse.ArgumentParser) -> dict:
    """Our fit (and the peer's) on the Epoch data, against the published values."""
    n, d, loss = load_epoch(args.epoch)
    ours = run_ours(n, d, loss, args.bootstrap)
    ours["rel_err_vs_published"] = rel_err(ours["params"], EPOCH_PUBLISHED["params"])
    ours["within_tolerance"] = all(abs(ours["rel_err_vs_published"][k]) <= TOL[k] for k in NAMES)
    if args.bootstrap:
        ours["bootstrap"]["overlaps_published"] = {
            k: overlap(ours["bootstrap"]["intervals"][k], EPOCH_PUBLISHED["intervals"][k])
            for k in NAMES}
    epoch = {"points": int(len(loss)), "published": EPOCH_PUBLISHED, "ours": ours}
    if not args.skip_peer:
        try:
            import chinchilla  # noqa: F401
        except ImportError:
            ap.error("the peer library is not installed: pip install -c "
                     "requirements/constraints.txt -e '.[bench]' (pins chinchilla==0.2.0), "
                     "or pass --skip-peer")
        peer = run_peer(n, d, loss, parallel=not args.peer_serial)
        peer["rel_err_vs_published"] = rel_err(peer["params"], EPOCH_PUBLISHED["params"])
        epoch["peer_chinchilla_0_2_0"] = peer
        epoch["speed_ratio_peer_over_ours"] = peer["wall_s"] / ours["wall_s"]
    return epoch


def print_epoch(epoch: dict, bootstrap: int) -> None:
    ours = epoch["ours"]
    pub = EPOCH_PUBLISHED["params"]
    print(f"\nEpoch data ({epoch['points']} points), published grid of 4,500 L-BFGS starts")
    rows = [("published", pub), ("ours", ours["params"]), ("ours default", ours["auto"]["params"]),
            ("ours varpro", ours["varpro"]["params"])]
    if "peer_chinchilla_0_2_0" in epoch:
        rows.append(("peer chinchilla", epoch["peer_chinchilla_0_2_0"]["params"]))
    print(f"{'':18s}" + "".join(f"{k:>12s}" for k in NAMES))
    for name, p in rows:
        print(f"{name:18s}" + "".join(f"{p[k]:12.5g}" for k in NAMES))
        if name != "published":
            print(f"{'  rel. error':18s}" + "".join(f"{p[k] / pub[k] - 1:12.2%}" for k in NAMES))
    st = ours["start_stats"]
    print(f"ours: {ours['wall_s']:.2f} s; {st['n_reached_optimum']}/{st['n_starts']} starts "
          f"({st['fraction_reached_optimum']:.1%}) reached the optimum; within tolerance: "
          f"{ours['within_tolerance']}")
    sa = ours["auto"]
    print(f"ours default (init=\"auto\", path {sa['path']}): {sa['wall_s']:.2f} s; parameters "
          f"within {sa['max_rel_diff_vs_grid']:.1e} (relative) of the grid's")
    sv = ours["varpro"]
    print(f"ours varpro: {sv['wall_s']:.2f} s; {sv['start_stats']['fraction_reached_optimum']:.1%}"
          f" of {sv['start_stats']['n_starts']} starts reached the optimum")
    for init, r in ours["grid_3x5"].items():
        s3 = r["start_stats"]
        print(f"3^5 grid, init={init}: {s3['n_reached_optimum']}/{s3['n_starts']} starts "
              f"({s3['fraction_reached_optimum']:.1%}) reached the optimum; E={r['params']['E']:.4f}"
              f" alpha={r['params']['alpha']:.4f} beta={r['params']['beta']:.4f}; "
              f"{r['wall_s']:.2f} s")
    bt = ours["backtest"]
    print(f"backtest (refit without N={bt['held_out_n']:.3g}, {bt['held_out_rows']} row): "
          f"log-loss error {bt['mean_log_error']:+.4f} vs noise {bt['noise_log']:.4f}; "
          f"warnings: {bt['warnings'] or 'none'}")
    if "peer_chinchilla_0_2_0" in epoch:
        pr = epoch["peer_chinchilla_0_2_0"]
        print(f"peer: {pr['wall_s']:.2f} s on {pr['processes']} process(es); speed ratio "
              f"peer/ours = {epoch['speed_ratio_peer_over_ours']:.1f}x")
    if bootstrap:
        b = ours["bootstrap"]
        print(f"\nbootstrap ({b['n']} resamples, {b['wall_s']:.1f} s): 95% intervals vs published")
        for k in NAMES:
            lo, hi = b["intervals"][k]
            plo, phi = EPOCH_PUBLISHED["intervals"][k]
            print(f"  {k:6s} [{lo:.4g}, {hi:.4g}]  published [{plo:.4g}, {phi:.4g}]  "
                  f"overlap={b['overlaps_published'][k]}  s.e.={b['stderr'][k]:.3g}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epoch", type=Path,
                    default=DATA / "epoch_chinchilla" / "svg_extracted_data.csv",
                    help="Epoch's CSV (not vendored: see benchmarks/data/README.md)")
    ap.add_argument("--datablations", type=Path,
                    default=DATA / "datablations" / "data_constrained_val_losses.csv")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (0: none)")
    ap.add_argument("--skip-peer", action="store_true", help="do not run the PyPI `chinchilla`")
    ap.add_argument("--peer-serial", action="store_true",
                    help="run the peer on one process (default: its own multiprocessing pool)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if not args.datablations.exists():
        ap.error(f"data file not found: {args.datablations}")
    default_epoch = ap.get_default("epoch")
    if not args.epoch.exists() and args.epoch != default_epoch:
        ap.error(f"data file not found: {args.epoch}")

    report: dict = {"machine": {**machine({"platform": "platform", "processor": "processor",
                                           "cpus": "cpu_count", "python": "python",
                                           "load_avg": "loadavg_start"}),
                                "numpy": np.__version__}}
    if args.epoch.exists():
        report["epoch"] = run_epoch(args, ap)
    else:  # the Epoch data are not vendored (no licence): skip that part and say so
        report["epoch"] = {"skipped": f"{args.epoch} not found: the Epoch data are not vendored "
                                      "(their repository states no licence); "
                                      "benchmarks/data/README.md gives the download command"}
    report["datablations"] = {"published": DATABLATIONS_PUBLISHED,
                              "fits": run_datablations(args.datablations)}
    report["machine"]["loadavg_end"] = list(os.getloadavg())

    if args.json:
        print(json.dumps(report, default=float))
        return 0
    m = report["machine"]
    print(f"machine: {m['platform']}, {m['cpu_count']} CPUs; load average start "
          f"{m['loadavg_start']}, end {m['loadavg_end']}")
    if "skipped" in report["epoch"]:
        print(f"\nEpoch data: skipped: {report['epoch']['skipped']}")
    else:
        print_epoch(report["epoch"], args.bootstrap)
    print("\nDatablations tied-exponent fit (published E=1.87 A=521 B=1488 alpha=beta=0.3527)")
    for name, r in report["datablations"]["fits"].items():
        p = r["params"]
        print(f"  {name:45s} n={r['rows']:3d}  E={p['E']:.4g} A={p['A']:.4g} B={p['B']:.4g} "
              f"alpha=beta={p['alpha']:.4g}  ({r['wall_s']:.2f} s; default: {r['auto']['path']}, "
              f"{r['auto']['wall_s']:.2f} s, within {r['auto']['max_rel_diff_vs_grid']:.1e})")
    return 0

if __name__ == "__main__":
    sys.exit(main())
