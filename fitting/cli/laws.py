"""``mnmt-fit fit``, ``frontier`` and ``recommend``: one law fitted to a table, and the eq. 11
law's trade-off frontier and recommended weights (Fernandes et al. 2023 eq. 11, §3.4).

Each command takes the parsed arguments of :func:`fitting.cli.build_parser` and returns the
result :mod:`fitting.cli` prints (a fit, a dict of fits, or JSON-ready values).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fitting import plots
from fitting.cli.inputs import (
    bootstrap_options,
    final_loss_table,
    fit_options,
    load_input,
    parse_floats,
    parse_law_options,
    parse_values,
)
from fitting.core.base import FitError, FitResult
from fitting.data.tables import (
    check_numeric,
    drop_invalid_rows,
    require_columns,
    without_branches,
)
from fitting.laws.budget import chinchilla
from fitting.laws.mixture import dpl
from fitting.laws.quality import fit_quality_law, quality_points
from fitting.laws.size.bivariate import fit_bivariate_law
from fitting.laws.size.effective import MultilingualLawFit, fit_multilingual_law
from fitting.laws.size.frontier import frontier_2pair, frontier_kpair, recommend
from fitting.laws.size.joint import fit_joint_law
from fitting.laws.size.power import fit_power_law

__all__ = ["fit_command", "frontier_command", "recommend_command"]


def fit_command(args: argparse.Namespace) -> dict | FitResult:
    """``mnmt-fit fit``: the law ``--law`` fitted to ``--input`` (the power law on a table of
    several pairs or weights, without ``--pair``/``--weight``: a dict, one fit per pair and
    weight, or {"error": message} where that group's fit failed)."""
    df = load_input(args)
    src = ",".join(args.input)
    opts = parse_law_options(args.option)
    if args.law in ("chinchilla", "dpl"):
        return _fit_bootstrapped(df, args, src, opts)
    if args.law == "quality":
        return _fit_quality(df, args, src, opts)
    return _fit_final_losses(df, args, src, opts)


def _fit_bootstrapped(df: Any, args: argparse.Namespace, src: str, opts: dict) -> FitResult:
    """The Chinchilla or the DPL law, whose only uncertainty is the bootstrap."""
    law = args.law
    mod = {"chinchilla": chinchilla, "dpl": dpl}[law]
    pre_dropped = 0
    if law == "chinchilla" and "loss" not in df.columns and {"metric", "value"} <= set(
            df.columns):
        # tidy table: final losses (map d with --columns d=tokens), with the ends of
        # cool-down branches: each is the loss at a smaller budget D (Hägele et al. 2024)
        df, pre_dropped = final_loss_table(df, args, include_branches=True)
    kw = {**bootstrap_options(args), **opts}
    fit = mod.fit_from_table(df, source=src, **kw)
    if kw.get("bootstrap"):
        fit.meta["uncertainty"] = (f"bootstrap, {kw['bootstrap']} resamples (the only "
                                   f"uncertainty method of the {law} law)")
    if pre_dropped:
        fit.warnings.append(f"{pre_dropped} row(s) with invalid values were dropped "
                            "(--drop-invalid)")
    return fit


def _fit_quality(df: Any, args: argparse.Namespace, src: str, opts: dict) -> FitResult:
    """A quality law: ``--quality-metric`` against cross-entropy (Ghorbani eq. 5)."""
    m = args.quality_metric
    if "metric" not in df.columns:  # a user table: its own loss and metric columns
        require_columns(df, ["loss", m], src)
    if not ({"loss", m} <= set(df.columns)):
        df = quality_points(without_branches(df), m, eval_set=args.eval_set,
                            pair=args.pair)
    elif args.pair is not None and "pair" in df.columns:
        df = df[df["pair"] == args.pair]
    if args.drop_invalid:
        df, _ = drop_invalid_rows(df, ["loss", m], positive=["loss"])
    kw = fit_options(args)
    return fit_quality_law(check_numeric(df, "loss", src), check_numeric(df, m, src),
                           form=args.form or "power", metric=m, **kw, **opts)


def _fit_final_losses(df: Any, args: argparse.Namespace, src: str, opts: dict
                      ) -> dict | FitResult:
    """A law of the final losses: power, joint, multilingual (eq. 11) or bivariate."""
    law = args.law
    fin, dropped = final_loss_table(df, args)
    if args.pair is not None:
        fin = fin[fin["pair"].astype(str) == args.pair] if "pair" in fin.columns else fin
        if fin.empty:
            raise FitError(f"no rows for pair {args.pair!r}", column="pair", source=src)
    kw = {**fit_options(args), **opts}
    res: Any
    if law == "power":
        if args.weight is not None and "weight" in fin.columns:
            fin = fin[(fin["weight"].astype(float) - args.weight).abs() < 1e-9]
        groups = [c for c in ("pair", "weight") if c in fin.columns and fin[c].nunique() > 1]
        if groups:
            res = {}
            for key, g in fin.groupby(groups):
                key = key if isinstance(key, tuple) else (key,)
                name = ",".join(f"{c}={k}" for c, k in zip(groups, key, strict=True))
                if "weight" in groups and float(key[groups.index("weight")]) == 0:
                    continue
                try:
                    res[name] = fit_power_law(g["n"], g["loss"], **kw)
                except FitError as e:
                    res[name] = {"error": str(e)}
        else:
            _need(fin, "n", src)
            res = fit_power_law(fin["n"], fin["loss"], **kw)
    elif law == "joint":
        res = fit_joint_law(fin, loss_col="loss", source=src, **kw)
    elif law == "multilingual":
        res = fit_multilingual_law(fin, form=args.form or "eq12", loss_col="loss", source=src,
                                   **kw)
    elif law == "bivariate":
        require_columns(fin, ["n_enc", "n_dec", "loss"], src)
        res = fit_bivariate_law(fin["n_enc"].to_numpy(float), fin["n_dec"].to_numpy(float),
                                fin["loss"].to_numpy(float), **kw)
    else:  # pragma: no cover - argparse restricts choices
        raise FitError(f"unknown law {law!r}")
    if dropped:
        msg = f"{dropped} row(s) with invalid values were dropped (--drop-invalid)"
        for r in (res.values() if isinstance(res, dict) else [res]):
            if isinstance(r, FitResult):
                r.warnings.append(msg)
    return res


def _need(df, col, src):
    require_columns(df, [col], src)
    return col


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
    fin, _ = final_loss_table(load_input(args), args)
    return fit_multilingual_law(fin, form=args.form or "eq12", loss_col="loss",
                                **fit_options(args))


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
