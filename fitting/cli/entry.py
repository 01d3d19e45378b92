"""``mnmt-fit``: fit the papers' laws to a metrics table, draw frontiers, recommend weights, report.

    mnmt-fit fit --law LAW --input TABLE [--columns n=params,loss=val_loss] [--json] [--out F]
    mnmt-fit frontier | recommend  (--fit FIT.json | --input TABLE) …
    mnmt-fit report --input TABLE_OR_RUN_DIRS... --out DIR …
    mnmt-fit compare | mixture | curves | design TABLE …

Every option: docs/reference/cli.md; input columns per law: docs/guides/fitting.md. Exit status
2 on bad input (the message names the column and row). This module holds the parser, the
dispatch (:data:`COMMANDS`) and the printing; each subcommand's work is in its module of
:mod:`fitting.cli`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from fitting.cli.curves import curves_command, curves_text
from fitting.cli.design import add_design_parser, design_command, design_text
from fitting.cli.laws import fit_command, frontier_command, recommend_command
from fitting.cli.reports import compare_command, mixture_command, report_command
from fitting.core.base import FitError, FitResult, json_safe, table_laws
from fitting.core.options import DEFAULT_UNCERTAINTY
from fitting.laws.curves.joint_fit import CURVE_UNCERTAINTY
from fitting.report.sections.mixture import mixture_text

__all__ = ["main", "build_parser"]

#: ``mnmt-fit``'s subcommands: name → the function of the parsed arguments returning the result.
COMMANDS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "fit": fit_command,
    "frontier": frontier_command,
    "recommend": recommend_command,
    "report": report_command,
    "compare": compare_command,
    "mixture": mixture_command,
    "curves": curves_command,
    "design": design_command,
}


def build_parser() -> argparse.ArgumentParser:
    """The ``mnmt-fit`` argument parser."""
    ap = argparse.ArgumentParser(prog="mnmt-fit", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, need_input=True):
        p.add_argument("--input", nargs="+", required=need_input, default=None,
                       help="CSV/Parquet table(s) or run directories")
        p.add_argument("--columns", help="map our column names to yours: n=params,loss=val_loss")
        p.add_argument("--eval-set", default="validation")
        p.add_argument("--metric", default="loss", help="metric of the tidy table to fit")
        p.add_argument("--drop-invalid", action="store_true",
                       help="drop rows with NaN/inf/non-positive values (count reported)")
        p.add_argument("--uncertainty", default=DEFAULT_UNCERTAINTY.method or "none",
                       choices=["perturbation", "bootstrap", "both", "none"])
        p.add_argument("--n-refits", type=int, default=DEFAULT_UNCERTAINTY.n_refits)
        p.add_argument("--f-scale", default="auto", help="soft_l1 f_scale, or 'auto' (grid)")
        p.add_argument("--seed", type=int, default=DEFAULT_UNCERTAINTY.seed)
        p.add_argument("--form", help="multilingual: eq12|eq13; quality: power|linear")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.add_argument("--out", help="write the JSON result to this file")

    p = sub.add_parser("fit", help="fit one law")
    p.add_argument("--law", required=True, choices=table_laws(),
                   help="a registered law (fitting.core.base.register_law) that fits a table")
    common(p)
    p.add_argument("--pair", help="fit only this pair")
    p.add_argument("--weight", type=float, help="power: fit only this weight")
    p.add_argument("--quality-metric", default="bleu", help="quality: bleu, chrf, bleurt, …")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="extra keyword option for the law's fit function (repeatable)")

    p = sub.add_parser("frontier", help="predicted trade-off frontier (eq. 11)")
    common(p, need_input=False)
    p.add_argument("--fit", help="a multilingual fit JSON (or a report's fits.json)")
    p.add_argument("--sizes", required=True, help="model sizes N, comma-separated")
    p.add_argument("--pairs", help="pairs (default: all fitted)")
    p.add_argument("--n-weights", type=int, default=99)
    p.add_argument("--step", type=float, default=0.05, help="K-pair simplex grid step")
    p.add_argument("--quality-fit", help="quality-law JSON: frontier in BLEU/ChrF")
    p.add_argument("--plot", help="write a PNG of the frontier")

    p = sub.add_parser("recommend", help="recommended mixture weights at a target size")
    common(p, need_input=False)
    p.add_argument("--fit", help="a multilingual fit JSON (or a report's fits.json)")
    p.add_argument("--n", required=True, help="target model size(s) N")
    p.add_argument("--preferences", help="importance per pair: en-de=2,en-zh=1 (default equal)")
    p.add_argument("--objective", default="loss", choices=["loss", "relative"])

    p = sub.add_parser("report", help="Markdown/HTML/PNG/JSON report of a study")
    common(p)
    p.set_defaults(json=False)
    p.add_argument("--ground-truth", help="true L∞ per pair: en-de=0.14,en-zh=0.15 or a JSON file")
    p.add_argument("--target-sizes", help="sizes for the predicted frontier/recommendation")
    p.add_argument("--title", default="Scaling-law report")
    p.add_argument("--preferences", help="importance per pair for the recommendation")
    p.add_argument("--convergence-correction", type=float, metavar="STEP",
                   help="extrapolate final losses of runs with p ≤ 0.05 to STEP (App. G)")
    p.add_argument("--heldout", action="append", metavar="RUN_ID",
                   help="a run trained but never fitted: left out of every fit and predicted "
                        "in the report (repeatable)")
    p.add_argument("--stop-fraction", type=float, metavar="F",
                   help="section Early stop: predict each run's cooled-down end from its curve "
                        "up to F of its steps (default: a stopped study's own fraction; given "
                        "for a table of full runs, every end checks its prediction)")

    p = sub.add_parser("compare", help="f(p) of several studies side by side (Fernandes Fig. 6)")
    p.add_argument("studies", nargs="+", metavar="TABLE_OR_DIR",
                   help="a study's metrics table (CSV/Parquet), its output directory, or a "
                        "folder of run directories")
    p.add_argument("--out", required=True, help="directory for comparison.md/.json and the figure")
    p.add_argument("--labels", help="panel titles, comma-separated, one per study (default: the "
                                    "study column, else the file or directory name)")
    p.add_argument("--eval-set", default="validation")
    p.add_argument("--metric", default="loss")
    p.add_argument("--n-refits", type=int, default=30,
                   help="perturbation refits for the sd of f(p)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-f-hat", action="store_true", help="do not fit f̂ of eq. 12")
    p.add_argument("--title", default="f(p) side by side")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")

    p = sub.add_parser("mixture", help="mixture laws for K pairs: comparison by held-out error, "
                                       "transfer matrix, constrained weights")
    p.add_argument("table", metavar="TABLE",
                   help="tidy table (CSV/Parquet) or a wide CSV of runs (run_id, n or size, "
                        "w_<pair>, loss_<pair>, optional heldout 0/1, data_size_<pair>)")
    p.add_argument("--target-size", type=float, help="N of the recommendation (default: 4× the "
                                                     "largest fitted size)")
    p.add_argument("--heldout", action="append", metavar="RUN_ID",
                   help="a run never fitted, predicted (repeatable)")
    p.add_argument("--max-weight", action="append", metavar="PAIR=W")
    p.add_argument("--max-loss", action="append", metavar="PAIR=L")
    p.add_argument("--prefer", action="append", metavar="PAIR=X",
                   help="importance of a pair in the mean loss (default 1)")
    p.add_argument("--epoch-cap", type=float, help="maximum epochs over a pair's data")
    p.add_argument("--budget", type=float, metavar="EXAMPLES",
                   help="training examples per run (with --epoch-cap)")
    p.add_argument("--eval-set", default="validation")
    p.add_argument("--metric", default="loss")
    p.add_argument("--n-boot", type=int, default=100, help="bootstrap refits over mixtures")
    p.add_argument("--folds", type=int, default=10, help="CV folds over design mixtures "
                   "(leave-one-mixture-out up to twice as many mixtures)")
    p.add_argument("--workers", type=int, help="processes for the refits (default: 1 for "
                   "small tables, else the CPU count up to 8)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--out", help="directory for mixture.json and transfer.png")

    p = sub.add_parser("curves", help="schedule-aware loss-curve laws: fit runs, predict "
                                      "held-out runs at every step")
    p.add_argument("table", metavar="TABLE",
                   help="tidy metrics table (learning_rate and probe_loss or train_loss rows) "
                        "or a table with columns run, step, lr (or learning_rate), loss (or "
                        "probe_loss, or train_loss), "
                        "optional n; CSV/Parquet/JSONL")
    p.add_argument("--holdout", action="append", metavar="RUN", required=True,
                   help="a run never fitted, predicted (repeatable)")
    p.add_argument("--law", choices=["annealing", "multipower"], default="annealing",
                   help="annealing: Tissue et al. 2024 eq. 1; multipower: Luo et al. 2025")
    p.add_argument("--columns", help="map our column names to yours: run=name,lr=learning_rate")
    p.add_argument("--metric", default=None,
                   help="the loss metric (default: probe_loss where the table has probe rows "
                        "of the pair, else train_loss)")
    p.add_argument("--pair", default=None,
                   help="tidy table: the pair whose curve is fitted (default: task 'all' of "
                        "train_loss, or the one pair of the probe rows)")
    p.add_argument("--from-step", type=float, default=0.0,
                   help="fit and predict losses from this step on (always after the warm-up)")
    p.add_argument("--size-terms", choices=["auto", "on", "off"], default="auto",
                   help="L0(N) = E + A_N·N^−a (auto: with ≥ 3 distinct sizes n, or with "
                        "--fixed-e / --size-exponent)")
    p.add_argument("--fixed-e", type=float, metavar="VALUE",
                   help="size terms with E fixed at VALUE (0: L0 = A_N·N^−a), A_N and a fitted: "
                        "an assumption that lets two sizes predict a third")
    p.add_argument("--size-exponent", type=float, metavar="VALUE",
                   help="size terms with the exponent a fixed at VALUE, E and A_N fitted: an "
                        "assumption that lets two sizes predict a third")
    p.add_argument("--uncertainty", choices=["perturbation", "none"], default="perturbation")
    p.add_argument("--n-refits", type=int, default=CURVE_UNCERTAINTY.n_refits)
    p.add_argument("--seed", type=int, default=CURVE_UNCERTAINTY.seed)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--out", help="write the JSON result to this file")
    add_design_parser(sub)
    return ap


def _print(result: Any, as_json: bool, out: str | None) -> None:
    if isinstance(result, FitResult):
        payload = result.to_json()
    elif isinstance(result, dict):
        payload = {k: (v.to_json() if isinstance(v, FitResult) else v) for k, v in result.items()}
    else:
        payload = result
    payload = json_safe(payload)
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(payload, f, indent=1)
    if as_json:
        print(json.dumps(payload, indent=1))
        return
    if isinstance(result, FitResult):
        print(result.summary())
    elif isinstance(result, dict) and any(isinstance(v, FitResult) for v in result.values()):
        for k, v in result.items():
            print(f"== {k}")
            print(v.summary() if isinstance(v, FitResult) else f"  skipped: {v['error']}")
    else:
        print(json.dumps(payload, indent=1))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``mnmt-fit``; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        res = COMMANDS[args.cmd](args)
        if args.cmd == "mixture" and not args.json:
            print(mixture_text(res))
            return 0
        text_of = {"curves": curves_text, "design": design_text}.get(args.cmd)
        if text_of is not None and not args.json:
            if args.out:
                with open(args.out, "w", encoding="utf-8") as f:
                    json.dump(json_safe(res), f, indent=1)
            print(text_of(res))
            return 0
        _print(res, getattr(args, "json", False),
               getattr(args, "out", None)
               if args.cmd not in ("report", "compare", "mixture") else None)
    except FitError as e:
        print(f"mnmt-fit: error: {e}", file=sys.stderr)
        return 2
    except (OSError, json.JSONDecodeError) as e:
        print(f"mnmt-fit: error: {e}", file=sys.stderr)
        return 2
    return 0

