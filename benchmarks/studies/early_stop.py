"""Early stop: how often a run's cooled-down end, predicted from its curve up to a share f of
its steps, lies within k·σ_seed of its trained end (k = 3, or Student's t on σ's dof where
wider), and inside its predictive intervals — on finished studies, every run cut at its stop as
if stopped (benchmark mode: the stop is a prefix of the full run, tests/training/
test_stop_step.py), so every end is a check.

For each study output directory (``OUT/metrics.csv`` and ``OUT/study.json``; its held-out runs
left out as the report does) the report's section (:func:`fitting.report.sections.early_stop.
early_stop_payload`) is computed at ``--fraction``; per study and pair: ends predicted, checked,
within k·σ_seed, inside the 80 / 95 % intervals, median and worst |error|, σ_seed and the
verdict; then, pooled over every (run, pair) of every study, the share within k·σ_seed and the
intervals' coverage with Clopper–Pearson 90 % intervals over the ends and over the study × pair
clusters (:func:`fitting.intervals.predictive.coverage_by_cluster`).

Usage (from the repository root):
    nice python benchmarks/studies/early_stop.py OUT [OUT …] [--fraction 0.6] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fitting.data.tables import read_table
from fitting.intervals.predictive import LEVELS, coverage_by_cluster, coverage_text
from fitting.report.sections.early_stop import early_stop_payload
from fitting.report.view import prepare_view


def heldout_ids(out: Path, table) -> list[str]:
    """The held-out runs of a study: those of a size its study.json holds out and its grid
    does not train (the default study's mini-3 runs)."""
    study = json.loads((out / "study.json").read_text())
    sizes = {entry[0] for entry in study.get("heldout", [])} - set(study.get("sizes", []))
    runs = table.loc[table["size"].astype(str).isin(sizes), "run_id"].astype(str)
    return sorted(set(runs))


def one_study(out: Path, fraction: float) -> dict:
    table = read_table(str(out / "metrics.csv"))
    view = prepare_view(table, heldout_runs=heldout_ids(out, table))
    return early_stop_payload(view, fraction)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outs", nargs="+", type=Path)
    parser.add_argument("--fraction", type=float, default=0.6)
    parser.add_argument("--json", type=Path, help="write every study's payload here")
    args = parser.parse_args(argv)
    pooled, payloads, marks = [], {}, {level: {} for level in LEVELS}
    print("| study | pair | predicted | checked | within kσ | inside 80 % | inside 95 % | "
          "median \\|err\\| | worst \\|err\\| | σ_seed (dof) | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for out in args.outs:
        payload = payloads[str(out)] = one_study(out, args.fraction)
        for pair, d in payload["pairs"].items():
            c80, c95 = d["coverage"]["0.80"], d["coverage"]["0.95"]
            within = [e["within_3sigma"] for e in d["ends"] if e.get("within_3sigma")
                      is not None]
            pooled += within
            for level in LEVELS:
                key = f"inside{round(100 * level)}"
                marks[level][(str(out), pair)] = [bool(e[key]) for e in d["ends"]
                                                  if e.get(key) is not None]
            sigma = "–" if d["sigma"] is None else f"{d['sigma']:.2%} ({d['sigma_dof']})"
            print(f"| {out.name} | {pair} | {d['n_predicted']} | {d['n_checked']} | "
                  f"{d['n_within']}/{len(within)} | {c80['inside']}/{c80['n']} | "
                  f"{c95['inside']}/{c95['n']} | {d['median_abs_error']:.2%} | "
                  f"{d['worst_abs_error']:.2%} | {sigma} | {d['verdict']} |")
        for pair, why in payload["skipped"].items():
            print(f"| {out.name} | {pair} | skipped: {why} |||||||||")
    if pooled:
        print(f"\npooled: {sum(pooled)}/{len(pooled)} ends within k·σ_seed "
              f"({sum(pooled) / len(pooled):.0%}; the verdict asks ≥ 80 %)")
    cov = coverage_by_cluster(marks)
    print("pooled: inside their predictive intervals, " + "; ".join(
        f"{level:.0%} {coverage_text(cov, level)}" for level in LEVELS))
    if args.json:
        args.json.write_text(json.dumps(payloads, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
