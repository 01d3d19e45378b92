"""``mnmt-fit``: fit the papers' laws to a metrics table, draw frontiers, recommend weights, report.

    mnmt-fit fit --law {power,joint,multilingual,bivariate,chinchilla,dpl,quality} --input TABLE
                 [--columns n=params,loss=val_loss] [--json] [--out FIT.json] [law options]
    mnmt-fit frontier  (--fit FIT.json | --input TABLE) --sizes 1e8,1e9 [--plot F.png] [--json]
    mnmt-fit recommend (--fit FIT.json | --input TABLE) --n 1e9 [--preferences en-de=2,en-zh=1]
    mnmt-fit report --input TABLE_OR_RUN_DIRS... --out DIR [--ground-truth en-de=0.14,...]
                    [--heldout RUN_ID ...]
    mnmt-fit compare TABLE_OR_DIR [TABLE_OR_DIR ...] --out DIR [--labels A,B]
    mnmt-fit mixture TABLE [--target-size N] [--heldout RUN_ID ...] [--max-weight PAIR=W ...]
                     [--max-loss PAIR=L ...] [--prefer PAIR=X ...] [--epoch-cap E --budget EXAMPLES]
                     [--json] [--out DIR]

Input columns per law are documented in docs/guides/fitting.md. Exit status 2 on bad input (the message
names the column and row).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from fitting import plots
from fitting.core.base import FitError, FitResult, json_safe
from fitting.data.rundirs import collect_runs
from fitting.data.tables import (
    check_finite_positive,
    check_numeric,
    check_weights,
    drop_invalid_rows,
    final_losses,
    read_table,
    require_columns,
    without_branches,
)
from fitting.laws import chinchilla, dpl
from fitting.laws.bivariate import fit_bivariate_law
from fitting.laws.effective import MultilingualLawFit, fit_multilingual_law
from fitting.laws.frontier import frontier_2pair, frontier_kpair, recommend
from fitting.laws.joint import fit_joint_law
from fitting.laws.power import fit_power_law
from fitting.laws.quality import fit_quality_law, quality_points
from fitting.report.compare import write_comparison
from fitting.report.mixture import mixture_run_table, mixture_text
from fitting.report.writer import write_report

__all__ = ["main", "build_parser"]

LAWS = ("power", "joint", "multilingual", "bivariate", "chinchilla", "dpl", "quality")


def _floats(text: str | None, what: str) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise FitError(f"--{what}: expected comma-separated numbers, got {text!r}") from None


def _kv(text: str | None, what: str) -> dict[str, float] | None:
    if text is None:
        return None
    out = {}
    for item in text.split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise FitError(f"--{what}: expected name=value items, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = float(v)
        except ValueError:
            raise FitError(f"--{what}: value of {k.strip()!r} is not a number: {v!r}") from None
    return out


def _options(items: Sequence[str] | None) -> dict[str, Any]:
    """``--option key=value`` pairs; values parsed as JSON when possible (numbers, lists, bools)."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise FitError(f"--option: expected key=value, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v
    return out


def _load(args) -> Any:
    inputs = args.input
    if len(inputs) > 1:
        return read_table(collect_runs(inputs), args.columns)
    return read_table(inputs[0], args.columns)


def _final(df, args, include_branches: bool = False):
    """Final losses with a ``loss`` column: a user table as is, or the tidy table's final rows
    (cool-down branches left out unless ``include_branches``: they are smaller token budgets of
    their parents, points of L(N, D) but not of the size laws)."""
    src = ",".join(args.input)
    if "loss" in df.columns:
        # a user table: validate it here, so that a bad value is reported with its row in the
        # table (not its position inside a pair/weight group), and --drop-invalid drops it
        used = ("n_enc", "n_dec", "loss") if getattr(args, "law", None) == "bivariate" else (
            "n", "loss")
        num = [c for c in used if c in df.columns]
        dropped = 0
        if args.drop_invalid:
            df, dropped = drop_invalid_rows(df, num, positive=num)
        for c in num:
            check_finite_positive(df, c, src)
        if "weight" in df.columns:
            check_weights(df, "weight", src)
        return df, dropped
    if {"metric", "value"} <= set(df.columns):
        fin, dropped = final_losses(df, eval_set=args.eval_set, metric=args.metric, source=src,
                                    drop_invalid=args.drop_invalid,
                                    include_branches=include_branches)
        return fin.rename(columns={"value": "loss"}), dropped
    raise FitError(f"{src}: needs a 'loss' column (or the tidy table's metric/value columns); "
                   f"has {list(df.columns)}", column="loss", source=src)


def _common_fit_kwargs(args) -> dict[str, Any]:
    fs: Any = args.f_scale
    if fs != "auto":
        try:
            fs = float(fs)
        except ValueError:
            raise FitError(f"--f-scale must be 'auto' or a number, got {fs!r}") from None
    unc = None if args.uncertainty == "none" else args.uncertainty
    return {"f_scale": fs, "uncertainty": unc, "n_refits": args.n_refits, "seed": args.seed}


def _bootstrap_kwargs(args) -> dict[str, Any]:
    """Shared options for the Chinchilla and DPL fits, whose uncertainty is the bootstrap only.

    ``--uncertainty`` other than ``none`` asks for ``--n-refits`` bootstrap resamples (rows
    resampled with replacement; recorded in the fit's ``meta["uncertainty"]``, also when
    ``perturbation`` was asked for); ``--seed`` and ``--drop-invalid`` are passed on.
    """
    kw: dict[str, Any] = {"seed": args.seed, "drop_invalid": args.drop_invalid}
    if args.uncertainty != "none" and args.n_refits > 0:
        kw["bootstrap"] = args.n_refits
    return kw


def _fit(args) -> dict | FitResult:
    df = _load(args)
    src = ",".join(args.input)
    opts = _options(args.option)
    law = args.law
    if law in ("chinchilla", "dpl"):
        mod = {"chinchilla": chinchilla, "dpl": dpl}[law]
        pre_dropped = 0
        if law == "chinchilla" and "loss" not in df.columns and {"metric", "value"} <= set(
                df.columns):
            # tidy table: final losses (map d with --columns d=tokens), with the ends of
            # cool-down branches: each is the loss at a smaller budget D (Hägele et al. 2024)
            df, pre_dropped = _final(df, args, include_branches=True)
        kw = {**_bootstrap_kwargs(args), **opts}
        fit = mod.fit_from_table(df, source=src, **kw)
        if kw.get("bootstrap"):
            fit.meta["uncertainty"] = (f"bootstrap, {kw['bootstrap']} resamples (the only "
                                       f"uncertainty method of the {law} law)")
        if pre_dropped:
            fit.warnings.append(f"{pre_dropped} row(s) with invalid values were dropped "
                                "(--drop-invalid)")
        return fit
    if law == "quality":
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
        kw = _common_fit_kwargs(args)
        return fit_quality_law(check_numeric(df, "loss", src), check_numeric(df, m, src),
                               form=args.form or "power", metric=m, **kw, **opts)
    fin, dropped = _final(df, args)
    if args.pair is not None:
        fin = fin[fin["pair"].astype(str) == args.pair] if "pair" in fin.columns else fin
        if fin.empty:
            raise FitError(f"no rows for pair {args.pair!r}", column="pair", source=src)
    kw = {**_common_fit_kwargs(args), **opts}
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


def _law_from(args):
    """The eq. 11 law: from --fit (a fit JSON or a report's fits.json) or fitted on --input; a
    warning on stderr for each pair whose f̂ is not identified."""
    law = _load_law(args)
    for pair, reason in law.not_identified().items():
        print(f"warning: f̂ ({law.form}) not identified for {pair}: {reason}", file=sys.stderr)
    return law


def _load_law(args):
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
    fin, _ = _final(_load(args), args)
    return fit_multilingual_law(fin, form=args.form or "eq12", loss_col="loss",
                                **_common_fit_kwargs(args))


def _frontier(args) -> dict:
    law = _law_from(args)
    sizes = _floats(args.sizes, "sizes")
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


def _recommend(args) -> list[dict]:
    law = _law_from(args)
    sizes = _floats(args.n, "n")
    if not sizes:
        raise FitError("--n: give a target model size")
    prefs = _kv(args.preferences, "preferences")
    return [{**recommend(law, n, prefs, objective=args.objective).to_json(),
             "f_hat_identified": law.identified} for n in sizes]


def _report(args) -> dict:
    if not args.out:
        raise FitError("report: --out DIR is required")
    gt: dict | None = None
    if args.ground_truth:
        if args.ground_truth.endswith(".json"):
            with open(args.ground_truth, encoding="utf-8") as f:
                gt = {k: float(v) for k, v in json.load(f).items()}
        else:
            gt = _kv(args.ground_truth, "ground-truth")
    df = _load(args)
    unc = None if args.uncertainty == "none" else args.uncertainty
    rep = write_report(df, args.out, ground_truth=gt,
                       target_sizes=_floats(args.target_sizes, "target-sizes"), title=args.title,
                       eval_set=args.eval_set, metric=args.metric, uncertainty=unc,
                       n_refits=args.n_refits, seed=args.seed, drop_invalid=args.drop_invalid,
                       preferences=_kv(args.preferences, "preferences"),
                       convergence_correction=args.convergence_correction,
                       heldout_runs=args.heldout or ())
    return {"markdown": rep.markdown_path, "html": rep.html_path, "json": rep.json_path,
            "figures": rep.figures, "skipped": rep.skipped, "regime": rep.regime.get("verdict"),
            "heldout": [{k: e[k] for k in ("run", "pair", "law", "predicted", "measured",
                                           "error", "within_tolerance")} for e in rep.heldout]}


def _compare(args) -> dict:
    labels = [t.strip() for t in args.labels.split(",")] if args.labels else None
    cmp = write_comparison(args.studies, args.out, labels=labels, eval_set=args.eval_set,
                           metric=args.metric, n_refits=args.n_refits, seed=args.seed,
                           fit_f_hat=not args.no_f_hat, title=args.title)
    return {"markdown": cmp.markdown_path, "json": cmp.json_path, "figure": cmp.figure_path,
            "studies": [{"label": st["label"], "source": st["source"],
                         "synergy": st["synergy"], "skipped": st["skipped"]}
                        for st in cmp.studies]}


def _pair_values(items: Sequence[str] | None, what: str) -> dict[str, float] | None:
    """Repeated ``PAIR=VALUE`` options → {pair: value}."""
    if not items:
        return None
    return _kv(",".join(items), what)


def _mixture(args) -> dict:
    if (args.epoch_cap is None) != (args.budget is None):
        raise FitError("mixture: --epoch-cap and --budget go together (the epoch cap of each "
                       "pair is epoch_cap · data_size / budget)")
    constraints = {"max_weights": _pair_values(args.max_weight, "max-weight"),
                   "max_loss": _pair_values(args.max_loss, "max-loss"),
                   "preferences": _pair_values(args.prefer, "prefer"),
                   "budget_examples": args.budget, "epoch_cap": args.epoch_cap}
    return mixture_run_table(args.table, heldout_runs=args.heldout or (),
                             target_size=args.target_size, constraints=constraints,
                             eval_set=args.eval_set, metric=args.metric, n_boot=args.n_boot,
                             seed=args.seed, out_dir=args.out, max_folds=args.folds,
                             workers=args.workers,
                             progress=None if args.quiet else _stderr_line)


def _stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


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
        p.add_argument("--uncertainty", default="perturbation",
                       choices=["perturbation", "bootstrap", "both", "none"])
        p.add_argument("--n-refits", type=int, default=100)
        p.add_argument("--f-scale", default="auto", help="soft_l1 f_scale, or 'auto' (grid)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--form", help="multilingual: eq12|eq13; quality: power|linear")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.add_argument("--out", help="write the JSON result to this file")

    p = sub.add_parser("fit", help="fit one law")
    p.add_argument("--law", required=True, choices=LAWS)
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
        if args.cmd == "fit":
            res = _fit(args)
        elif args.cmd == "frontier":
            res = _frontier(args)
        elif args.cmd == "recommend":
            res = _recommend(args)
        elif args.cmd == "compare":
            res = _compare(args)
        elif args.cmd == "mixture":
            res = _mixture(args)
            if not args.json:
                print(mixture_text(res))
                return 0
        else:
            res = _report(args)
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
