"""The annealing momentum λ of the curve laws, swept on finished studies: the report's three
curve verdicts — the longer run (the last third of each run predicted from its first two
thirds), the later cool-down (each branch's and the parent's cooled-down end predicted from the
stable phase and the middle branch) and the early stop (each run's end predicted from its first
``--fraction``) — recomputed at each λ on the same tables.

λ sets how long the annealing area S2 of the LR-annealing law (Tissue et al. 2024, eq. 1)
remembers a drop of the learning rate: with λ = 0.8 a drop is forgotten within ≈ 5 steps, so
every cool-down to zero earns about the same S2 whatever its length; with λ near 1 a 400-step
cool-down earns more than a 90-step one. Per study, pair and λ: RMSE of the relative errors
of each verdict against 3σ_seed (the report's rule, σ_seed the seed sd at the largest repeated
size), and the mean signed error of each kind of end (the parent's own end, the earliest and the
latest branch).

Choose λ on some studies, judge it on others: the table names the studies it read.

Usage (from the repository root):
    nice python benchmarks/curve_lambda.py OUT [OUT …] [--lams 0.8 0.9 0.95 0.97 0.99]
        [--loss train] [--fraction 0.6] [--json FILE]

``--loss train`` drops a study's probe rows first, so that the curves are the per-pair
training loss, as in a study without probes (the default study's setting).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # run or loaded by path

from _common import machine  # noqa: E402  (benchmarks/_common.py)
from early_stop import heldout_ids  # noqa: E402  (benchmarks/early_stop.py)

from fitting.data.tables import read_table  # noqa: E402
from fitting.laws.curves.runs import PROBE_METRIC  # noqa: E402
from fitting.report.chinchilla import largest_size_seed_noises  # noqa: E402
from fitting.report.curves import curve_continuations  # noqa: E402
from fitting.report.early_stop import early_stop_payload  # noqa: E402
from fitting.report.extrapolation import NOISE_MULTIPLE, longer_run_errors  # noqa: E402
from fitting.report.view import prepare_view  # noqa: E402


def rmse(errors: list[float]) -> float:
    e = np.asarray([v for v in errors if np.isfinite(v)], dtype=float)
    return float(np.sqrt(np.mean(e ** 2))) if e.size else float("nan")


def end_kinds(ends: list[dict]) -> dict[str, float]:
    """Mean signed error of the parents' own ends and of each family's earliest and latest
    tested branch (the curve section's ``ends``)."""
    kinds: dict[str, list[float]] = {"parent": [], "earliest branch": [], "latest branch": []}
    families: dict[str, list[tuple[float, float]]] = {}
    for e in ends:
        if e.get("error") is None or e.get("fitted"):
            continue
        if str(e["run"]) == str(e.get("parent")):
            kinds["parent"].append(float(e["error"]))
        else:
            families.setdefault(str(e.get("parent")), []).append(
                (float(e["branch_step"]), float(e["error"])))
    for branches in families.values():
        branches.sort()
        kinds["earliest branch"].append(branches[0][1])
        kinds["latest branch"].append(branches[-1][1])
    return {k: float(np.mean(v)) if v else float("nan") for k, v in kinds.items()}


def one_study(out: Path, lams: list[float], loss: str, fraction: float) -> dict:
    table = read_table(str(out / "metrics.csv"))
    if loss == "train" and "metric" in table.columns:
        table = table[table["metric"] != PROBE_METRIC]
    view = prepare_view(table, heldout_runs=heldout_ids(out, table))
    noise = largest_size_seed_noises(view.seeds)[0]
    result: dict = {"sigma": {p: v.sigma for p, v in noise.items()}, "lams": {}}
    for lam in lams:
        t0 = time.perf_counter()
        curves, _ = curve_continuations(view, lam=lam)
        stop = early_stop_payload(view, fraction, lam=lam) if fraction < 1 else None
        per_pair = {}
        for pair in view.points:
            longer, why, _ = longer_run_errors(view, pair, lam=lam)
            got = ((curves or {}).get("pairs") or {}).get(pair) or {}
            later = list(got.get("errors") or [])
            ends = (stop or {}).get("pairs", {}).get(pair, {}).get("ends", [])
            within = [e["within_3sigma"] for e in ends if e.get("within_3sigma") is not None]
            per_pair[pair] = {"longer_rmse": rmse(longer), "later_rmse": rmse(later),
                              "kinds": end_kinds(got.get("ends") or []),
                              "stop_within": [int(sum(within)), len(within)], "why": why}
        result["lams"][str(lam)] = {"pairs": per_pair, "seconds": time.perf_counter() - t0}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outs", nargs="+", type=Path)
    parser.add_argument("--lams", nargs="+", type=float, default=[0.8, 0.9, 0.95, 0.97, 0.99])
    parser.add_argument("--loss", choices=("report", "train"), default="report",
                        help="report: the curves the report fits (the probe where present)")
    parser.add_argument("--fraction", type=float, default=0.6,
                        help="early stop's share of the steps (1: skip the early stop)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    print(f"machine: {machine()}; loss: {args.loss}; studies: "
          + ", ".join(o.name for o in args.outs))
    print("| study | pair | λ | longer run RMSE | later cool-down RMSE | 3σ_seed | both within "
          "| parent end / earliest / latest branch (mean signed) | early stop within 3σ |")
    print("|---|---|---|---|---|---|---|---|---|")
    results = {}
    for out in args.outs:
        res = results[str(out)] = one_study(out, args.lams, args.loss, args.fraction)
        for lam, d in res["lams"].items():
            for pair, r in d["pairs"].items():
                sig = res["sigma"].get(pair)
                lim = None if sig is None else NOISE_MULTIPLE * sig
                both = "–" if lim is None else (
                    "yes" if r["longer_rmse"] <= lim and r["later_rmse"] <= lim else "no")
                k = r["kinds"]
                sw = r["stop_within"]
                print(f"| {out.name} | {pair} | {lam} | {r['longer_rmse']:.2%} | "
                      f"{r['later_rmse']:.2%} | {'–' if lim is None else f'{lim:.2%}'} | "
                      f"{both} | {k['parent']:+.1%} / {k['earliest branch']:+.1%} / "
                      f"{k['latest branch']:+.1%} | {sw[0]}/{sw[1]} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
