"""Fewer cool-down branches: L(N, D) across weights with one trained branch per size (the
check) and the other budgets predicted from their run's curve, side by side with every branch
trained, on finished studies (:func:`fitting.report.fewer_branches.compare`).

For each study output directory (``OUT/metrics.csv``, ``OUT/study.json``; its held-out runs left
out of the fits as the report does): per pair, L∞ (E) of both fits, the leave-largest-size-out
backtest RMSE of both graded on the trained losses of the largest size, the held-out runs'
errors, the predicted budgets' median |error| and how many lie within 3σ_seed, σ_seed and the
verdict.

Usage (from the repository root):
    nice python benchmarks/studies/fewer_branches.py OUT [OUT …] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root (run or loaded by path)

from benchmarks.studies.early_stop import heldout_ids  # noqa: E402
from fitting.data.tables import read_table  # noqa: E402
from fitting.report.fewer_branches import compare  # noqa: E402


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None or not np.isfinite(x):
        return "–"
    return f"{x:+.2%}" if signed else f"{x:.2%}"


def _held(rows: list[dict]) -> str:
    return ", ".join(_pct(r["error"], True) for r in rows) or "–"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outs", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, help="write every study's comparison here")
    args = parser.parse_args(argv)
    print("| study | pair | points (predicted) | E trained | E fewer | ΔE | backtest trained | "
          "backtest fewer | held-out trained | held-out fewer | predicted: median \\|err\\| | "
          "within 3σ | σ_seed | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    results = {}
    for out in args.outs:
        t0 = time.perf_counter()
        table = read_table(str(out / "metrics.csv"))
        res = results[str(out)] = compare(table, heldout_runs=heldout_ids(out, table))
        res["seconds"] = time.perf_counter() - t0
        for pair, d in res["pairs"].items():
            errs = [abs(e["error"]) for e in d["budget_errors"]]
            print(f"| {out.name} | {pair} | {d['points_fewer']} ({d['predicted_points']}) | "
                  f"{d['E_trained']:.4f} | {d['E_fewer']:.4f} | "
                  f"{'both at a bound' if d['e_bound_both'] else _pct(d['e_change'], True)} | "
                  f"{_pct(d['backtest_trained'].get('rmse_rel'))} | "
                  f"{_pct(d['backtest_fewer'].get('rmse_rel'))} | "
                  f"{_held(d['heldout_trained'])} | {_held(d['heldout_fewer'])} | "
                  f"{_pct(float(np.median(errs)) if errs else None)} | "
                  f"{d['n_within']}/{len(errs)} | {_pct(d['sigma'])} | {res['verdict']} |")
        for pair, why in {**res["skipped"], **res["failed"]}.items():
            print(f"| {out.name} | {pair} | not predicted / skipped: {why} ||||||||||||")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
