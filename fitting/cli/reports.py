"""``mnmt-fit report``, ``compare`` and ``mixture``: the documents written from a study's table —
the study report, f(p) of several studies side by side (Fernandes Fig. 6), and the mixture laws
for K pairs.

Each command takes the parsed arguments of :func:`fitting.cli.build_parser` and returns the
summary :mod:`fitting.cli` prints (``mixture``: the payload of ``mixture.json``).
"""

from __future__ import annotations

import argparse
import json
import sys

from fitting.cli.inputs import load_input, parse_floats, parse_pair_values, parse_values
from fitting.core.base import FitError
from fitting.core.options import UncertaintyOptions, uncertainty_method
from fitting.report.compare import write_comparison
from fitting.report.sections.mixture import MixtureRunOptions, mixture_run_table
from fitting.report.writer import ReportOptions, write_report

__all__ = ["report_command", "compare_command", "mixture_command"]


def report_command(args: argparse.Namespace) -> dict:
    """``mnmt-fit report``: the study report of ``--input`` written to ``--out`` (Markdown, HTML,
    figures, ``fits.json``); returns its paths, skipped sections, regime and held-out runs."""
    if not args.out:
        raise FitError("report: --out DIR is required")
    fraction = getattr(args, "stop_fraction", None)
    if fraction is not None and not 0.0 < fraction < 1.0:  # NaN too
        raise FitError(f"report: --stop-fraction: expected a share in (0, 1) of each run's "
                       f"steps, got {fraction:g}")
    gt: dict | None = None
    if args.ground_truth:
        if args.ground_truth.endswith(".json"):
            with open(args.ground_truth, encoding="utf-8") as f:
                gt = {k: float(v) for k, v in json.load(f).items()}
        else:
            gt = parse_values(args.ground_truth, "ground-truth")
    df = load_input(args)
    rep = write_report(df, args.out, ReportOptions(
        ground_truth=gt, target_sizes=parse_floats(args.target_sizes, "target-sizes"),
        title=args.title, eval_set=args.eval_set, metric=args.metric,
        uncertainty=UncertaintyOptions(method=uncertainty_method(args.uncertainty),
                                       n_refits=args.n_refits, seed=args.seed),
        drop_invalid=args.drop_invalid,
        preferences=parse_values(args.preferences, "preferences"),
        convergence_correction=args.convergence_correction, heldout_runs=args.heldout or (),
        stop_fraction=fraction))
    return {"markdown": rep.markdown_path, "html": rep.html_path, "json": rep.json_path,
            "figures": rep.figures, "skipped": rep.skipped, "regime": rep.regime.get("verdict"),
            "heldout": [{k: e[k] for k in ("run", "pair", "law", "predicted", "measured",
                                           "error", "within_tolerance")} for e in rep.heldout]}


def compare_command(args: argparse.Namespace) -> dict:
    """``mnmt-fit compare``: f(p) of the studies side by side, written to ``--out``; returns the
    paths and each study's synergy and skipped fits."""
    labels = [t.strip() for t in args.labels.split(",")] if args.labels else None
    cmp = write_comparison(args.studies, args.out, labels=labels, eval_set=args.eval_set,
                           metric=args.metric, n_refits=args.n_refits, seed=args.seed,
                           fit_f_hat=not args.no_f_hat, title=args.title)
    return {"markdown": cmp.markdown_path, "json": cmp.json_path, "figure": cmp.figure_path,
            "studies": [{"label": st["label"], "source": st["source"],
                         "synergy": st["synergy"], "skipped": st["skipped"]}
                        for st in cmp.studies]}


def mixture_command(args: argparse.Namespace) -> dict:
    """``mnmt-fit mixture``: the mixture laws for K pairs fitted to ``TABLE``, compared, and the
    constrained weights (:func:`~fitting.report.sections.mixture.mixture_run_table`); progress lines on
    stderr unless ``--quiet``."""
    if (args.epoch_cap is None) != (args.budget is None):
        raise FitError("mixture: --epoch-cap and --budget go together (the epoch cap of each "
                       "pair is epoch_cap · data_size / budget)")
    constraints = {"max_weights": parse_pair_values(args.max_weight, "max-weight"),
                   "max_loss": parse_pair_values(args.max_loss, "max-loss"),
                   "preferences": parse_pair_values(args.prefer, "prefer"),
                   "budget_examples": args.budget, "epoch_cap": args.epoch_cap}
    return mixture_run_table(args.table, MixtureRunOptions(
        heldout_runs=args.heldout or (), target_size=args.target_size, constraints=constraints,
        eval_set=args.eval_set, metric=args.metric, n_boot=args.n_boot, seed=args.seed,
        out_dir=args.out, max_folds=args.folds, workers=args.workers,
        progress=None if args.quiet else _stderr_line))


def _stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
