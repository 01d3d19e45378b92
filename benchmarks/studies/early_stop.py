"""Early stop: how often a run's cooled-down end, predicted from its curve up to a share f of
its steps, lies within k·σ_seed of its trained end (k = 3, or Student's t on σ's dof where
wider), and inside its predictive intervals — on finished studies, every run cut at its stop as
if stopped (benchmark mode: the stop is a prefix of the full run, tests/training/
test_stop_step.py), so every end is a check.

With ``--as-stopped`` each finished study is read as the same study stopped at ``--fraction``
would have written it (:func:`as_stopped`; `StudySpec.stop_fraction`): its stopped runs (every
design run but the checks, ``mnmt.study.spec.stopped_runs``) keep their rows up to their stop S,
no ``final`` row, their later learning rates as ``planned_learning_rate`` rows, and only the
branches that left by S; the checks and held-out runs stay whole. Only the checks are then
checked, on intervals calibrated on the other checks, as in a stopped study. What a stopped
study writes that a finished one does not hold: the evaluation (and probe) at S where S is off
their grid — counted and printed, not invented. They would enter only the stopped runs'
predicted ends (the median gap to the judged loss), never a check's prediction or interval, so
the checks' coverage is the stopped study's (tests/study/test_early_stop_as_stopped.py).
``--save-stopped DIR`` writes each stopped table and its study.json to DIR/<study> for another
checkout's report (``mnmt-fit report --input DIR/<study>/metrics.csv``, or this script at an
older commit: the table is then read as stopped, every run with planned rates).

For each study output directory (``OUT/metrics.csv`` and ``OUT/study.json``; its held-out runs
left out as the report does) the report's section (:func:`fitting.report.sections.early_stop.
early_stop_payload`) is computed at ``--fraction``; per study and pair: ends predicted, checked,
within k·σ_seed, inside the 80 / 95 % intervals, median and worst |error|, σ_seed and the
verdict; then, pooled over every (run, pair) of every study, the share within k·σ_seed and the
intervals' coverage with Clopper–Pearson 90 % intervals over the ends and over the study × pair
clusters (:func:`fitting.intervals.predictive.coverage_by_cluster`).

Usage (from the repository root):
    nice python benchmarks/studies/early_stop.py OUT [OUT …] [--fraction 0.6] [--as-stopped]
        [--save-stopped DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import pandas as pd

from fitting.data.tables import read_table, write_table
from fitting.intervals.predictive import LEVELS, coverage_by_cluster, coverage_text
from fitting.laws.curves.early_stop import PLANNED_LR_METRIC
from fitting.report.sections.early_stop import early_stop_payload
from fitting.report.view import prepare_view
from mnmt.study.spec import StudySpec, expand, stopped_runs, with_branches
from mnmt.study.verify import recorded_spec


def heldout_ids(out: Path, table) -> list[str]:
    """The held-out runs of a study: those of a size its study.json holds out and its grid
    does not train (the default study's mini-3 runs)."""
    study = json.loads((out / "study.json").read_text())
    sizes = {entry[0] for entry in study.get("heldout", [])} - set(study.get("sizes", []))
    runs = table.loc[table["size"].astype(str).isin(sizes), "run_id"].astype(str)
    return sorted(set(runs))


def _stopped_rows(rows: pd.DataFrame, stop: int) -> pd.DataFrame:
    """One finished run's rows as the run stopped at ``stop`` writes them: those up to the stop
    (none ``final``), then its later ``learning_rate`` rows as planned rates carrying the
    tokens trained by the stop (mnmt.training.loop, ``_planned_rows``)."""
    kept = rows[rows["step"] <= stop].assign(final=False)
    later = rows[(rows["metric"] == "learning_rate") & (rows["step"] > stop)]
    tokens = kept.loc[kept["metric"] == "learning_rate", "tokens"].max()
    return pd.concat([kept, later.assign(metric=PLANNED_LR_METRIC, tokens=tokens, final=False)],
                     ignore_index=True)


def as_stopped(table: pd.DataFrame, spec: StudySpec, fraction: float
               ) -> tuple[pd.DataFrame, int]:
    """(the table that ``spec`` stopped at ``fraction`` would have written, the rows of it that
    ``table`` cannot give): the module docstring's rule. The rows not given are each stopped
    run's evaluation (and probe) losses at its stop S where S is off the eval (probe) grid."""
    stopped_spec = spec.replace(stop_fraction=fraction)
    stops = {r.run_id: stopped_spec.stop_step_for(r) for r in expand(stopped_spec)
             if r.run_id in stopped_runs(stopped_spec)}
    runs = table["run_id"].astype(str)
    dropped = ({r.run_id for r in with_branches(spec, expand(spec))}
               - {r.run_id for r in with_branches(stopped_spec, expand(stopped_spec))})
    ev = spec.evaluation
    frames, missing = [table[~runs.isin(dropped | set(stops))]], 0
    for run, stop in stops.items():
        frames.append(_stopped_rows(table[runs == run], stop))
        missing += len(spec.pairs) * (len(ev.eval_sets) * bool(stop % ev.eval_every)
                                      + bool(ev.probe_every and stop % ev.probe_every))
    return pd.concat(frames, ignore_index=True), missing


def one_study(out: Path, fraction: float, stopped: bool = False,
              save: Path | None = None) -> dict:
    """The report's early-stop payload of the study in ``out``: benchmark mode, or with
    ``stopped`` the table :func:`as_stopped` (``payload["rows_not_given"]``), written with
    ``out``'s study.json into ``save``/<out's name> when given."""
    table = read_table(str(out / "metrics.csv"))
    missing = None
    if stopped:
        table, missing = as_stopped(table, recorded_spec(out), fraction)
        if save is not None:
            (save / out.name).mkdir(parents=True, exist_ok=True)
            write_table(table, str(save / out.name / "metrics.csv"))
            shutil.copyfile(out / "study.json", save / out.name / "study.json")
    view = prepare_view(table, heldout_runs=heldout_ids(out, table))
    return {**early_stop_payload(view, fraction), "rows_not_given": missing}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outs", nargs="+", type=Path)
    parser.add_argument("--fraction", type=float, default=0.6)
    parser.add_argument("--as-stopped", action="store_true",
                        help="read each study as stopped at --fraction (only checks checked)")
    parser.add_argument("--save-stopped", type=Path, metavar="DIR",
                        help="with --as-stopped: write each stopped table to DIR/<study>")
    parser.add_argument("--json", type=Path, help="write every study's payload here")
    args = parser.parse_args(argv)
    pooled, payloads, marks = [], {}, {level: {} for level in LEVELS}
    print("| study | pair | predicted | checked | within kσ | inside 80 % | inside 95 % | "
          "median \\|err\\| | worst \\|err\\| | σ_seed (dof) | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for out in args.outs:
        payload = payloads[str(out)] = one_study(out, args.fraction, args.as_stopped,
                                                   args.save_stopped)
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
    not_given = {out: p["rows_not_given"] for out, p in payloads.items() if p["rows_not_given"]}
    if not_given:
        print("\nnot in a finished study, so left out of the stopped tables: the evaluations "
              "at the stop, " + ", ".join(f"{Path(o).name} {n} rows" for o, n in
                                          not_given.items()))
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
