"""``mnmt-fit fit``, ``frontier`` and ``recommend``: one law fitted to a table, and the eq. 11
law's trade-off frontier and recommended weights (Fernandes et al. 2023 eq. 11, §3.4).

Each command takes the parsed arguments of :func:`fitting.cli.build_parser` and returns the
result :mod:`fitting.cli` prints (a fit, a dict of fits, or JSON-ready values).
"""

from __future__ import annotations

import argparse
import json
import sys

from fitting import plots
from fitting.cli.inputs import load_input, parse_floats, parse_values, table_request
from fitting.core.base import FitError, FitResult, get_law
from fitting.laws.size.effective import MultilingualLawFit, fit_multilingual_law
from fitting.laws.size.frontier import frontier_2pair, frontier_kpair, recommend
from fitting.laws.table_fits import final_loss_table

__all__ = ["fit_command", "frontier_command", "recommend_command"]


def fit_command(args: argparse.Namespace) -> dict | FitResult:
    """``mnmt-fit fit``: the law ``--law`` fitted to ``--input`` by its registered class's
    :meth:`~fitting.core.base.FitResult.fit_table` (the power law on a table of several pairs
    or weights, without ``--pair``/``--weight``: a dict, one fit per pair and weight, or
    {"error": message} where that group's fit failed)."""
    df = load_input(args)
    return get_law(args.law).fit_table(df, table_request(args))


def _law_from(args: argparse.Namespace) -> MultilingualLawFit:
    """The eq. 11 law: from --fit (a fit JSON or a report's fits.json) or fitted on --input; a
    warning on stderr for each pair whose f̂ is not identified."""
    law = _load_law(args)
    for pair, reason in law.not_identified().items():
        print(f"warning: f̂ ({law.form}) not identified for {pair}: {reason}", file=sys.stderr)
    return law


def _load_law(args: argparse.Namespace) -> MultilingualLawFit:
    if args.fit:
        with open(args.fit, encoding="utf-8") as f:
            d = json.load(f)
        if isinstance(d, dict) and "law" not in d and d.get("effective"):
            d = d["effective"]
        fit = FitResult.from_json(d)
        if not isinstance(fit, MultilingualLawFit):
            raise FitError(f"{args.fit}: holds a {fit.law!r} fit; frontier/recommend need the "
                           "'multilingual' (eq. 11) law")
        return fit
    if not args.input:
        raise FitError("give --fit FIT.json or --input TABLE")
    request = table_request(args)
    fin, _ = final_loss_table(load_input(args), request)
    return fit_multilingual_law(fin, form=args.form or "eq12", loss_col="loss",
                                **request.fit_options())


def frontier_command(args: argparse.Namespace) -> dict:
    """``mnmt-fit frontier``: the eq. 11 law's trade-off frontier at ``--sizes`` (two pairs: over
    ``--n-weights`` weights, with its band and an optional ``--plot``; more: over a simplex grid
    of ``--step``), in loss or, with ``--quality-fit``, in that quality metric."""
    law = _law_from(args)
    sizes = parse_floats(args.sizes, "sizes")
    if not sizes:
        raise FitError("--sizes: give at least one model size")
    pairs = args.pairs.split(",") if args.pairs else list(law.pairs or [])
    mm, metric = None, "loss"
    if args.quality_fit:
        with open(args.quality_fit, encoding="utf-8") as f:
            q = FitResult.from_json(json.load(f))
        mm = {p: q.predict for p in pairs}
        metric = getattr(q, "metric", "quality")
    if len(pairs) == 2:
        fr = frontier_2pair(law, sizes, pairs=pairs, metric_map=mm, metric=metric,
                            n_weights=args.n_weights)
    else:
        fr = frontier_kpair(law, sizes, pairs=pairs, step=args.step, metric_map=mm,
                            metric=metric, higher_is_better=metric != "loss")
    if args.plot and len(pairs) == 2:
        curves = {n: (v[:, 0], v[:, 1]) for n, v in fr.values.items()}
        bands = {n: ((fr.lower[n][:, 0], fr.upper[n][:, 0]), (fr.lower[n][:, 1],
                                                              fr.upper[n][:, 1]))
                 for n in fr.lower}
        plots.save(plots.plot_frontier(curves, pairs, bands=bands, metric=metric), args.plot)
    return fr.to_json()


def recommend_command(args: argparse.Namespace) -> list[dict]:
    """``mnmt-fit recommend``: the eq. 11 law's recommended weights at each size of ``--n``,
    under ``--preferences`` and ``--objective``."""
    law = _law_from(args)
    sizes = parse_floats(args.n, "n")
    if not sizes:
        raise FitError("--n: give a target model size")
    prefs = parse_values(args.preferences, "preferences")
    return [{**recommend(law, n, prefs, objective=args.objective).to_json(),
             "f_hat_identified": law.identified} for n in sizes]
