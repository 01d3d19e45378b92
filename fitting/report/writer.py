"""Study report: fitted laws with uncertainty, regime, figures — Markdown, HTML, PNG and JSON.

:func:`write_report` takes the tidy table (docs/reference/metrics_schema.md) and writes into ``out_dir``:
``report.md``, ``report.html``, ``fits.json`` and ``figures/*.png`` (the three text files under
temporary names, then renamed: a failed write, e.g. a full disk, leaves a previous report's
files whole). It fits, on final losses,
the power law (Fernandes eq. 6) per pair and weight, the joint law (eq. 7) with effective
fractions (eq. 10), and the eq. 11 law with the predicted frontier and recommended weights at
``target_sizes`` (sections of :mod:`fitting.report.sections`). It recognises the other papers'
experiments in the table and fits their laws too: the Double Power Law of Chen et al. when pairs
have different capped data sizes (:mod:`fitting.report.dpl`), L(N, D) of Caillaut et al. when
runs were evaluated at several token counts (:mod:`fitting.report.chinchilla`), Ghorbani et al.'s
encoder/decoder law when the decoder fraction varies (:mod:`fitting.report.bivariate`).
Experiments repeated with several seeds are fitted on their seed means, and the seed spread is
reported (:mod:`fitting.report.seeds`). Weights are told apart by one rule
(:func:`fitting.data.tables.round_weights`, 6 significant digits): a two-pair study's 1 − 0.7 and
0.3 are one weight in every fit, key and table. Every section that cannot be computed (too few
points, no p = 1 runs, …) is skipped with its reason stated; it never crashes on small studies.

Runs named in ``heldout_runs`` are trained but never fitted: their rows are removed before every
fit (size laws, joint law, f(p), eq. 11–13, quality laws, backtests, frontier) and the section
"Held-out runs (predicted, never fitted)" compares their final losses with the laws'
predictions (:mod:`fitting.report.heldout`). They still count in the regime (learning curves, best loss)
and appear in the learning-curve figure, which describe the trained runs, not a fit.

Cool-down branches (schema revision 1.2; Hägele et al. 2024) never enter the size laws, seeds,
held-out predictions or quality laws: those see the same numbers as the table without the
branches. Their final losses are cooled-down token budgets of their parents, used by the regime
(:mod:`fitting.report.regime`, which judges convergence) and by L(N, D). A held-out run's
branches are held out with it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import numpy as np
import pandas as pd

from fitting import plots
from fitting.core.base import FitError, json_safe
from fitting.data import io
from fitting.data.tables import (
    final_losses,
    has_branches,
    is_branch,
    read_table,
    round_weights,
    without_branches,
)
from fitting.laws.curves.learning_curve import correct_final_losses
from fitting.laws.size.joint import fit_joint_law
from fitting.laws.size.power import fit_power_law
from fitting.report.bivariate import bivariate_section
from fitting.report.chinchilla import (
    chinchilla_section,
    cooled_law_section,
    fit_cooled_law,
    largest_size_seed_noise,
)
from fitting.report.dpl import dpl_section
from fitting.report.heldout import check_heldout_runs, heldout_section
from fitting.report.markdown import Document, format_number
from fitting.report.mixture import mixture_section
from fitting.report.regime import compute_regime, fitted_l_inf, regime_section, trained_rows
from fitting.report.sections import Report, frontier_section, quality_section
from fitting.report.seeds import seed_means, seed_spread, seeds_section
from fitting.report.verification import (
    split_verification,
    verification_section,
    verification_seed_noise,
)

__all__ = ["Report", "write_report"]


# -- the report ---------------------------------------------------------------------------------


def _points(fin: pd.DataFrame) -> dict[str, dict[float, tuple[np.ndarray, np.ndarray]]]:
    data: dict[str, dict[float, tuple[np.ndarray, np.ndarray]]] = {}
    has_w = "weight" in fin.columns
    for pair, sub in fin.groupby("pair", sort=True):
        data[str(pair)] = {}
        groups = sub.groupby("weight", sort=True) if has_w else [(1.0, sub)]
        for w, g in groups:
            if not np.isfinite(float(w)):
                continue
            g = g.sort_values("n")
            data[str(pair)][float(w)] = (g["n"].to_numpy(float), g["value"].to_numpy(float))
    return data


def write_report(
    table: pd.DataFrame | str,
    out_dir: str,
    *,
    ground_truth: dict[str, float] | None = None,
    target_sizes: list[float] | None = None,
    title: str = "Scaling-law report",
    eval_set: str = "validation",
    metric: str = "loss",
    uncertainty: str | None = "perturbation",
    n_refits: int = 100,
    seed: int = 0,
    drop_invalid: bool = False,
    preferences: dict[str, float] | None = None,
    convergence_correction: float | None = None,
    heldout_runs: Sequence[str] = (),
    mixture_constraints: dict | None = None,
    verification: dict | None = None,
) -> Report:
    """Fit the laws to ``table``'s final losses and write the report into ``out_dir``.

    Args:
      table: the tidy table (DataFrame or CSV/Parquet path or run directories).
      ground_truth: ``{pair: L∞_true}`` printed next to the fitted L∞ (synthetic studies).
      target_sizes: model sizes N at which to predict the frontier and recommend weights
        (default: 4× and 16× the largest fitted size).
      uncertainty / n_refits: passed to the fits (Fernandes footnote 5 perturbations).
      drop_invalid: drop rows with non-finite/non-positive losses (count reported) instead of
        raising FitError.
      preferences: ``{pair: importance}`` for the recommendation (default: equal).
      convergence_correction: a training step; final losses of runs with weight ≤ 0.05 are
        replaced by their learning-curve extrapolation to that step (Fernandes App. G).
      heldout_runs: run ids trained but never fitted: excluded from every fit, predicted in the
        section "Held-out runs" (``rep.heldout``, ``fits.json["heldout"]``; see
        :mod:`fitting.report.heldout`). An id that is not a run of the table raises FitError.
      mixture_constraints: for tables of 3 pairs or more, the constraints of the mixture-law
        recommendation (:mod:`fitting.report.mixture`, ``fits.json["mixture"]``): keys
        ``max_weights`` {pair: w}, ``max_loss`` {pair: L}, ``preferences`` {pair: x},
        ``budget_examples`` and ``epoch_cap`` (epoch-cap weights from each pair's data_size).
      verification: the runs that trained the mixture recommendation and its baselines
        (:mod:`fitting.report.verification`: size, seeds, mixtures, runs): removed from the
        table before every fit, reported in the section "Verification"
        (``fits.json["mixture"]["verification"]``).
    """
    if not isinstance(table, pd.DataFrame):
        table = read_table(table)
    # one rule for telling weights apart (round_weights): en-zh's 1 − 0.7 is en-de's 0.3 in
    # every fit, key, seed group and table of the report
    table = round_weights(table)
    table, verify_rows = split_verification(table, verification)  # never fitted
    held_ids = check_heldout_runs(table, heldout_runs)
    os.makedirs(os.path.join(out_dir, "figures"), exist_ok=True)
    fin, n_dropped = final_losses(table, eval_set=eval_set, metric=metric,
                                  drop_invalid=drop_invalid, source="report")
    rep = Report(out_dir=out_dir, markdown_path=os.path.join(out_dir, "report.md"),
                 html_path=os.path.join(out_dir, "report.html"),
                 json_path=os.path.join(out_dir, "fits.json"))
    if n_dropped:
        rep.warnings.append(f"{n_dropped} final row(s) with invalid values were dropped")
    n_corrected = 0
    if convergence_correction:
        fin = correct_final_losses(table, target_step=convergence_correction, final=fin,
                                   eval_set=eval_set, metric=metric)
        n_corrected = int(fin["corrected"].sum())
    # held-out runs: out of every fit from here on (kept in `fin_all` for the regime and `held`)
    fin_all, table_fit = fin, table
    held = fin.iloc[:0]
    if held_ids:
        is_held = fin["run_id"].astype(str).isin(held_ids).to_numpy()
        held, fin = fin[is_held], fin[~is_held]
        # a held-out run's cool-down branches are held out with it
        held_rows = table["run_id"].astype(str).isin(held_ids).to_numpy()
        if "parent_run" in table.columns:
            held_rows = held_rows | table["parent_run"].astype(str).isin(held_ids).to_numpy()
        table_fit = table[~held_rows]
        if fin.empty:
            raise FitError(f"every run with final {metric!r} rows is held out ({held_ids}): "
                           "nothing is left to fit", column="run_id")
    # runs repeated with several seeds: every fit below uses the seed mean of each experiment
    fin_seeds = fin
    rep.seeds = seed_spread(fin)
    fin = seed_means(fin)
    data = _points(fin)
    # figures leave out zero-shot rows (p = 0), as Fernandes et al. do
    shown = {pair: {w: v for w, v in by_w.items() if w > 0} for pair, by_w in data.items()}
    doc = Document()
    doc.h(1, title)
    n_runs = fin_seeds["run_id"].nunique() if "run_id" in fin_seeds.columns else len(fin_seeds)
    sizes = sorted(fin["n"].unique())
    n_branches = table.loc[is_branch(table), "run_id"].nunique() if "run_id" in table.columns \
        else 0
    doc.p(f"Data: {n_runs} fitted runs, pairs {', '.join(data)}, {len(sizes)} model sizes "
          f"(N = {sizes[0]:.3g} … {sizes[-1]:.3g} non-embedding parameters), eval set "
          f"`{eval_set}`, metric `{metric}`, final values."
          + (f" Held out (trained, never fitted; predicted below): "
             f"{', '.join(f'`{r}`' for r in held_ids)}." if held_ids else "")
          + (f" {n_branches} cool-down branches (Hägele et al. 2024) are left out of the size "
             "laws; their final losses give the regime and L(N, D) their cooled-down token "
             "budgets." if n_branches else ""))
    if convergence_correction:
        doc.p(f"Convergence correction (Fernandes App. G): {n_corrected} final loss(es) of runs "
              f"with weight ≤ 0.05 replaced by their learning-curve extrapolation to step "
              f"{convergence_correction:g}.")
    seeds_section(doc, rep.seeds)

    # 1. per pair and weight: power law (eq. 6); one reason per pair when no weight can have it
    few_sizes = fin["n"].nunique() < 3
    for pair, by_w in data.items():
        rep.power_fits[pair] = {}
        if few_sizes:
            rep.skipped[f"power {pair}"] = (f"{fin['n'].nunique()} model size(s) in the table; "
                                            "the size laws need at least 3")
            continue
        for w, (n, y) in by_w.items():
            if w <= 0:
                rep.skipped[f"power {pair} p={w:g}"] = "zero-shot weight (p = 0) is outside the law"
                continue
            try:
                rep.power_fits[pair][w] = fit_power_law(n, y, uncertainty=uncertainty,
                                                        n_refits=n_refits, seed=seed)
            except FitError as e:
                rep.skipped[f"power {pair} p={w:g}"] = str(e)
    # 2. joint law (eq. 7)
    try:
        sub = fin[fin["weight"].notna()] if "weight" in fin.columns else fin.assign(weight=1.0)
        rep.joint = fit_joint_law(sub, uncertainty=uncertainty, n_refits=n_refits, seed=seed)
    except FitError as e:
        rep.skipped["joint law (eq. 7)"] = str(e)
    # the regime's fitted L∞: L(N, D)'s limit on cooled-down budgets where the table has them
    # (a pair it cannot fit has none: eq. 7's is this budget's, never in its place), else eq. 7's
    cooled, cooled_note, cooled_why = fit_cooled_law(
        table_fit, eval_set, metric, uncertainty=uncertainty, n_refits=n_refits, seed=seed,
        noise_rel=largest_size_seed_noise(rep.seeds)[0] or None)
    branches = has_branches(table)
    lf = fitted_l_inf(list(data), branches=branches, cooled=cooled, cooled_why=cooled_why,
                      joint=rep.joint, power_fits=rep.power_fits,
                      lowest={pair: float(min(np.min(y) for _, y in by_w.values()))
                              for pair, by_w in shown.items() if by_w})
    rep.regime = compute_regime(table, fin_all, lf["l_inf"], ground_truth, eval_set, metric,
                                lf["power"], l_inf_budget=lf["budget"] if branches else None,
                                l_inf_info=lf["info"])
    rep.regime["l_inf_law"] = lf["law"]
    rep.regime["heldout_runs"] = held_ids
    regime_section(doc, rep.regime, heldout=bool(held_ids))
    cooled_law_section(doc, rep, cooled, cooled_note, cooled_why, ground_truth)

    # power-law table
    doc.h(2, "Power law per pair and weight (Fernandes eq. 6)")
    doc.p("L_i(N; p) = β N^−α + L∞, fitted separately for every weight p; ± is the standard "
          "deviation over refits with 1% Gaussian perturbations of the losses (footnote 5). "
          "Backtest: refitted without the largest size, error of its prediction there.")
    rows = []
    for pair, fits in rep.power_fits.items():
        for w, f in sorted(fits.items()):
            sd = f.stderr or {}
            bt = f.backtest or {}
            rows.append([pair, f"{w:g}", str(f.n_points), format_number(f["alpha"], sd.get("alpha")),
                         format_number(f["beta"], sd.get("beta")), format_number(f["l_inf"], sd.get("l_inf")),
                         format_number(f.goodness.get("rmse"), digits=2),
                         format_number(bt.get("error"), digits=2) if bt else "–"])
            rep.warnings += [f"power {pair} p={w:g}: {m}" for m in f.warnings]
    doc.table(["pair", "p", "points", "α", "β", "L∞", "rmse", "backtest err"], rows)
    fits_by_pair = {pair: dict(fits) for pair, fits in rep.power_fits.items()}
    try:
        rep.figures["power_fits"] = plots.save(
            plots.plot_power_fits(shown, fits_by_pair),
            os.path.join(out_dir, "figures", "power_fits.png"))
        doc.img("figures/power_fits.png", "Final loss against model size per weight, with "
                "per-weight fits (cf. Fernandes Fig. 2).")
        coefs = {pair: {w: (f.params, f.stderr) for w, f in fits.items()}
                 for pair, fits in rep.power_fits.items() if len(fits) >= 2}
        if coefs:
            joint_vals = None
            if rep.joint is not None:
                joint_vals = {pair: {"alpha": rep.joint.params.get(f"alpha[{pair}]"),
                                     "l_inf": rep.joint.params.get(f"l_inf[{pair}]")}
                              for pair in coefs}
            rep.figures["coefficients"] = plots.save(
                plots.plot_coefficients(coefs, joint_vals),
                os.path.join(out_dir, "figures", "coefficients.png"))
            doc.img("figures/coefficients.png", "Per-weight coefficients against p (±1 sd); "
                    "dashed: joint-law values (cf. Fernandes Fig. 4).")
    except Exception as e:  # plotting must never break the report
        rep.skipped["figures (power)"] = f"{type(e).__name__}: {e}"

    _joint_section(doc, rep, shown, ground_truth, out_dir)
    _effective_section(doc, rep, fin, data, target_sizes, preferences, out_dir, uncertainty,
                       n_refits, seed)
    heldout_section(doc, rep, held, table, held_ids, eval_set, metric)
    mixture = None
    try:  # None for fewer than 3 pairs: two-pair reports are unchanged
        mixture = mixture_section(doc, rep, table, out_dir, eval_set=eval_set, metric=metric,
                                  heldout_runs=held_ids, target_sizes=target_sizes,
                                  constraints=mixture_constraints, n_boot=min(n_refits, 100),
                                  seed=seed, seed_noise=verification_seed_noise(
                                      verify_rows, verification, eval_set=eval_set,
                                      metric=metric))
    except Exception as e:  # the section skips its own failures; anything else, said here
        rep.skipped["section mixture laws"] = f"{type(e).__name__}: {e}"
    try:
        checked = verification_section(doc, rep, verify_rows, mixture, verification,
                                       rep.mixture_laws, eval_set=eval_set, metric=metric)
        if checked is not None:
            mixture = {**(mixture or {}), "verification": checked}
    except Exception as e:  # the section states its own skips; anything else, said here
        rep.skipped["section verification"] = f"{type(e).__name__}: {e}"
    for name, section in (
            ("quality laws", lambda: quality_section(doc, rep, without_branches(table_fit),
                                                     eval_set, out_dir)),
            ("bivariate", lambda: bivariate_section(doc, rep, fin, out_dir,
                                                    n_refits=min(n_refits, 30))),
            ("DPL", lambda: dpl_section(doc, rep, fin, out_dir, uncertainty=uncertainty,
                                        n_refits=n_refits, seed=seed)),
            ("L(N, D)", lambda: chinchilla_section(doc, rep, table_fit, eval_set, metric,
                                                   out_dir, uncertainty=uncertainty,
                                                   n_refits=n_refits, seed=seed))):
        try:
            section()
        except Exception as e:  # sections skip their own failures; anything else, said here
            rep.skipped[f"section {name}"] = f"{type(e).__name__}: {e}"
    _curves_figure(doc, rep, table, eval_set, metric, out_dir)

    if rep.skipped:
        doc.h(2, "Skipped")
        doc.ul([f"{k}: {v}" for k, v in rep.skipped.items()])
    if rep.warnings:
        doc.h(2, "Warnings")
        doc.ul(rep.warnings)
    rep.markdown = doc.markdown()
    payload = {
        "title": title, "eval_set": eval_set, "metric": metric,
        "ground_truth": ground_truth, "regime": rep.regime, "skipped": rep.skipped,
        "warnings": rep.warnings, "figures": rep.figures,
        "power": {pair: {f"{w:g}": f.to_json() for w, f in fits.items()}
                  for pair, fits in rep.power_fits.items()},
        "joint": None if rep.joint is None else rep.joint.to_json(),
        "fraction": {pair: {f"{w:g}": {"f": v, "sd": sd} for w, (v, sd) in sorted(d.items())}
                     for pair, d in rep.fraction.items()},
        "effective": None if rep.effective is None else rep.effective.to_json(),
        "recommendation": rep.recommendation,
        "quality": {f"{m}/{p}": q.to_json() for (m, p), q in rep.quality.items()},
        "frontier": None if rep.frontier is None else rep.frontier.to_json(),
        "heldout_runs": held_ids,
        "heldout": rep.heldout,
        "seeds": rep.seeds,
        "dpl": rep.dpl or None,
        "chinchilla": rep.chinchilla or None,
        "bivariate": rep.bivariate or None,
    }
    if mixture is not None:
        payload["mixture"] = mixture
    # Temporary names, then renames: a failed write (a full disk: io.NoSpaceError naming the
    # file) leaves a previous report's three files as they were.
    io.write_files_atomic({rep.markdown_path: rep.markdown, rep.html_path: doc.html(title),
                           rep.json_path: json.dumps(json_safe(payload), indent=1)})
    return rep


def _joint_section(doc: Document, rep: Report, data, ground_truth, out_dir: str) -> None:
    doc.h(2, "Joint law (Fernandes eq. 7) and effective parameters (eq. 9–10)")
    if rep.joint is None:
        doc.p(f"Skipped: {rep.skipped.get('joint law (eq. 7)', 'not fitted')}")
        return
    j = rep.joint
    sd = j.stderr or {}
    iv = j.intervals or {}
    rows = []
    for pair in j.pairs or []:
        a, li = f"alpha[{pair}]", f"l_inf[{pair}]"
        lo_hi = iv.get(li)
        truth = (ground_truth or {}).get(pair)
        inside = ("–" if truth is None or lo_hi is None else
                  ("yes" if lo_hi[0] <= truth <= lo_hi[1] else "no"))
        bt = (j.backtest or {}).get(pair, {})
        rows.append([pair, format_number(j.params[a], sd.get(a)), format_number(j.params[li], sd.get(li)),
                     "–" if lo_hi is None else f"[{lo_hi[0]:.4g}, {lo_hi[1]:.4g}]",
                     format_number(truth), inside, format_number(j.goodness.get(f"r2[{pair}]"), digits=4),
                     format_number(bt.get("error"), digits=2) if bt else "–"])
    doc.table(["pair", "α", "L∞", "L∞ 95% interval", "true L∞", "truth inside", "R²",
               "backtest err"], rows)
    rep.warnings += [f"joint: {m}" for m in j.warnings]
    frac_pts: dict[str, dict[float, tuple[float, float]]] = {}
    for pair in j.pairs or []:
        if 1.0 not in (j.weights or {}).get(pair, []):
            rep.skipped[f"f(p) {pair}"] = "no runs with p = 1 (single-pair baseline): eq. 10 needs β_1"
            continue
        fs = j.fraction_samples(pair) if j.samples else {}
        frac_pts[pair] = {w: (float(j.fraction(w, pair)[0]),
                              float(np.std(fs[w], ddof=1)) if w in fs else float("nan"))
                          for w in j.weights[pair] if w > 0}
    rep.fraction = frac_pts
    if frac_pts:  # one column per weight (weights rounded by round_weights in write_report)
        weights = sorted({w for d in frac_pts.values() for w in d})
        doc.table(["pair", *[f"p={w:g}" for w in weights]],
                  [[pair] + [format_number(d.get(w, (None,))[0], d.get(w, (0, None))[1], 3)
                             for w in weights]
                   for pair, d in frac_pts.items()])
    try:
        rep.figures["joint"] = plots.save(
            plots.plot_joint(data, lambda pair, p, n: j.predict(n, p, pair), j.pairs or []),
            os.path.join(out_dir, "figures", "joint.png"))
        doc.img("figures/joint.png", "Joint law eq. 7 (dashed) against the data (cf. Fernandes Fig. 5).")
        rep.figures["reducible"] = plots.save(
            plots.plot_reducible(data, {p: j.params[f"l_inf[{p}]"] for p in j.pairs or []},
                                 curves={pair: {w: (lambda n, w=w, pair=pair: j.predict(n, w, pair))
                                                for w in (j.weights or {}).get(pair, [])}
                                         for pair in j.pairs or []}),
            os.path.join(out_dir, "figures", "reducible.png"))
        doc.img("figures/reducible.png", "Reducible loss L − L∞ on log-log axes with the joint "
                "law's lines; parallel lines mean a shared exponent (cf. Fernandes Fig. 3).")
        if frac_pts:
            rep.figures["fraction"] = plots.save(
                plots.plot_fraction(frac_pts, title="effective fraction of parameters (eq. 10)"),
                                                 os.path.join(out_dir, "figures", "fraction.png"))
            doc.img("figures/fraction.png", "Effective fraction of parameters f(p) (eq. 10; "
                    "cf. Fernandes Fig. 6).")
    except Exception as e:
        rep.skipped["figures (joint)"] = f"{type(e).__name__}: {e}"


def _effective_section(doc, rep, fin, data, target_sizes, preferences, out_dir, uncertainty,
                       n_refits, seed) -> None:
    """Eq. 11 law, frontier and recommendation (:func:`fitting.report.sections.frontier_section`)."""
    frontier_section(doc, rep, fin, data, target_sizes, preferences, out_dir, uncertainty,
                     n_refits, seed)


def _curves_figure(doc, rep, table, eval_set, metric, out_dir) -> None:
    if not {"run_id", "step"} <= set(table.columns):
        return
    series = table[(table["eval_set"] == eval_set) & (table["metric"] == metric)
                   & (table["step"] > 0)]
    if series.empty or series.groupby(["run_id", "pair"]).size().max() < 3:
        return
    branches = series[is_branch(series)]
    series = without_branches(series)
    curves = {f"{r}/{p}": (g["step"].to_numpy(float), g["value"].to_numpy(float))
              for (r, p), g in series.sort_values("step").groupby(["run_id", "pair"])}
    ends = {}
    for (parent, pair), g in (branches.groupby(["parent_run", "pair"]) if len(branches) else []):
        last = g[g["step"] == g.groupby("run_id")["step"].transform("max")].sort_values("step")
        ends[f"{parent}/{pair}"] = (last["step"].to_numpy(float), last["value"].to_numpy(float))
    panels = None
    note = ""
    if "n" in series.columns:  # one panel per pair, coloured by size; untrained pairs apart
        keys = series.drop_duplicates(["run_id", "pair"])
        trained = trained_rows(keys)
        panels = {f"{r}/{p}": (str(p), float(n))
                  for r, p, n in zip(trained["run_id"], trained["pair"], trained["n"], strict=True)
                  if np.isfinite(float(n))}
        left_out = len(keys) - len(trained)
        if left_out:
            note = (f" The {left_out} curves of pairs at weight 0 (evaluated, not trained; their "
                    "loss stays near that of an untrained model) are not drawn.")
    starts = [s for s in (rep.regime.get("cooldown_starts") or {}).values() if s]
    try:
        rep.figures["learning_curves"] = plots.save(
            plots.plot_learning_curves(curves, title=rep.regime.get("verdict", ""), panels=panels,
                                       cooldown_step=float(np.median(starts)) if starts else None,
                                       ends=ends or None),
            os.path.join(out_dir, "figures", "learning_curves.png"))
        doc.img("figures/learning_curves.png", "Validation loss against training step per run, "
                "one panel per pair, coloured by model size (convergence check, cf. Fernandes "
                "App. G)." + note + (" Triangles: the final losses of the runs' cool-down "
                                     "branches (Hägele et al. 2024)." if ends else ""))
    except Exception as e:
        rep.skipped["figures (learning curves)"] = f"{type(e).__name__}: {e}"
