"""How fast does an adaptive study pin E? Its rounds replayed on finished full-grid studies.

For each finished study of the default preset (the main job, any vocabulary seed), the adaptive
design (`StudySpec.adaptive`, `mnmt.study.adaptive.grow`) runs on the study's own runs: a run's
losses are read only once the design picks it, nothing is trained, so each round is what a live
adaptive study on that seed would have done with a pool of the grid's runs (a run the grid lacks —
an `adaptive_sizes` size — cannot be replayed: the script refuses it). Per round it prints the
share of the fixed grid's FLOPs spent, the report's 95 % interval of the target pair's E (the stop
rule's), whether it holds the exact L∞, and the design law's own interval; last, the full grid's
interval from the study's report, for comparison at 100 % of the FLOPs.

    python benchmarks/studies/adaptive_replay.py mnmt_study_out
    python benchmarks/studies/adaptive_replay.py OUT/seed30 OUT/seed31 --json

Exit status 0 when every study replays, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

from mnmt.study import adaptive
from mnmt.study.loading import load_spec


def replay(study: Path, bindings: list[str]) -> dict:
    """The adaptive rounds on ``study``'s finished runs, with the exact L∞ and the grid's E."""
    spec = load_spec(None, "default", ["StudySpec.adaptive=True", *bindings])
    design = adaptive.AdaptiveDesign(spec)
    eval_set = spec.evaluation.eval_sets[0]
    runs_dir = study / "runs"
    repeats, _ = adaptive.fixed_runs(spec)

    def train(runs: list) -> None:
        missing = [r.run_id for r in runs if not (runs_dir / r.run_id / "run.json").exists()]
        if missing:
            raise SystemExit(f"{study}: the grid lacks {missing[0]} (replays need every pool run "
                             "trained; drop adaptive_sizes)")

    with tempfile.TemporaryDirectory() as out:
        records = adaptive.grow(design, Path(out), train,
                                adaptive.measure_from_runs(design, runs_dir, eval_set),
                                adaptive.report_interval(design, runs_dir, eval_set, repeats),
                                log=lambda text: print(f"{study.name}: {text}", file=sys.stderr))
    truth = json.loads((study / "data" / "irreducible_loss.json").read_text())[design.pair][eval_set]
    fits = json.loads((study / "report" / "fits.json").read_text())
    grid = ((fits.get("chinchilla") or {}).get("joint") or {}).get("meta", {}).get(
        "E_predictive", {}).get(design.pair, {})
    return {"study": str(study), "pair": design.pair, "truth": truth, "rounds": [
        {"round": r["round"], "spent_before": r["spent"] - r.get("cost", 0.0)
         if r["round"] else 0.0, "budget": r["budget"], "before": r.get("before"),
         "design": r.get("design"), "chosen": r["chosen"], "stop": r.get("stop")}
        for r in records], "grid": {k: grid.get(k) for k in ("estimate", "lo95", "hi95")}}


def _holds(interval: dict | None, truth: float) -> str:
    if not interval or interval.get("lo95") is None:
        return "–"
    return "yes" if interval["lo95"] <= truth <= interval["hi95"] else "no"


def _text(interval: dict | None) -> str:
    if not interval or interval.get("lo95") is None:
        return "none"
    e = interval.get("E", interval.get("estimate"))
    return f"{e:.4g} [{interval['lo95']:.4g}, {interval['hi95']:.4g}]"


def table(result: dict) -> str:
    """One Markdown table per study: the rounds, then the full grid."""
    truth = result["truth"]
    lines = [f"{result['study']} ({result['pair']}, exact L∞ {truth:.4g})", "",
             "| round | FLOPs spent before (of the grid's) | report's E, 95 % | holds | "
             "±log | design law's E, 95 % | stop |", "|---|---|---|---|---|---|---|"]
    for r in result["rounds"][1:]:
        before = r["before"] or {}
        rel = before.get("relative")
        lines.append(f"| {r['round']} | {r['spent_before'] / r['budget']:.0%} | "
                     f"{_text(before)} | {_holds(before, truth)} | "
                     f"{'–' if rel is None else f'{rel:.1%}'} | {_text(r['design'])} | "
                     f"{r['stop'] or ''} |")
    grid = result["grid"]
    rel = f"{math.log(grid['hi95'] / grid['lo95']) / 2:.1%}" if grid.get("lo95") else "–"
    lines.append(f"| full grid | 100% | {_text(grid)} | {_holds(grid, truth)} | {rel} | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("studies", nargs="+", type=Path, help="finished default-preset studies")
    ap.add_argument("--gin", action="append", default=[], help="StudySpec bindings (adaptive_*)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    for study in args.studies:
        if not (study / "report" / "fits.json").exists() or not (study / "study.json").exists():
            print(f"{study}: not a finished study (no study.json or report/fits.json)",
                  file=sys.stderr)
            return 2
    results = [replay(study, args.gin) for study in args.studies]
    print(json.dumps(results, indent=1) if args.json else "\n\n".join(map(table, results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
