"""Study report: fitted laws with uncertainty, regime, figures — Markdown, HTML, PNG and JSON.

:func:`write_report` takes the tidy table (docs/reference/metrics_schema.md) and writes into ``out_dir``:
``report.md``, ``report.html``, ``fits.json`` and ``figures/*.png`` (the three text files under
temporary names, then renamed: a failed write, e.g. a full disk, leaves a previous report's
files whole). It fits, on final losses,
the power law (Fernandes eq. 6) per pair and weight, the joint law (eq. 7) with effective
fractions (eq. 10), and the eq. 11 law with the predicted frontier and recommended weights at
``target_sizes`` (sections of :mod:`fitting.report.sections.frontier`). It recognises the other papers'
experiments in the table and fits their laws too: the Double Power Law of Chen et al. when pairs
have different capped data sizes (:mod:`fitting.report.sections.dpl`), L(N, D) of Caillaut et al. when
runs were evaluated at several token counts (:mod:`fitting.report.sections.chinchilla`), Ghorbani et al.'s
encoder/decoder law when the decoder fraction varies (:mod:`fitting.report.sections.bivariate`).
Experiments repeated with several seeds are fitted on their seed means, and the seed spread is
reported (:mod:`fitting.report.sections.seeds`). Weights are told apart by one rule
(:func:`fitting.data.tables.round_weights`, 6 significant digits): a two-pair study's 1 − 0.7 and
0.3 are one weight in every fit, key and table. Every section that cannot be computed (too few
points, no p = 1 runs, …) is skipped with its reason stated; it never crashes on small studies.

Runs named in ``heldout_runs`` are trained but never fitted: their rows are removed before every
fit (size laws, joint law, f(p), eq. 11–13, quality laws, backtests, frontier) and the section
"Held-out runs (predicted, never fitted)" compares their final losses with the laws'
predictions (:mod:`fitting.report.sections.heldout`). They still count in the regime (learning curves, best loss)
and appear in the learning-curve figure, which describe the trained runs, not a fit.

Cool-down branches (schema revision 1.2; Hägele et al. 2024) never enter the size laws, seeds,
held-out predictions or quality laws: those see the same numbers as the table without the
branches. Their final losses are cooled-down token budgets of their parents, used by the regime
(:mod:`fitting.report.sections.regime`, which judges convergence) and by L(N, D). A held-out run's
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
from fitting.data.tables import is_branch, read_table, without_branches
from fitting.report.markdown import Document
from fitting.report.predicted_budgets import BudgetPlan, predicted_budgets
from fitting.report.record import Report
from fitting.report.sections.bivariate import bivariate_section
from fitting.report.sections.chinchilla import (
    chinchilla_section,
    cooled_law_section,
    fit_cooled_law,
    largest_size_seed_noises,
)
from fitting.report.sections.curves import curves_section
from fitting.report.sections.dpl import dpl_section
from fitting.report.sections.early_stop import early_stop_section, table_stop_fraction
from fitting.report.sections.extrapolation import extrapolation_section
from fitting.report.sections.frontier import frontier_section, quality_section
from fitting.report.sections.heldout import heldout_section
from fitting.report.sections.mixture import mixture_section
from fitting.report.sections.regime import (
    compute_regime,
    fitted_l_inf,
    regime_section,
    trained_rows,
)
from fitting.report.sections.seeds import seeds_section
from fitting.report.sections.size_laws import fit_size_laws, joint_section, power_section
from fitting.report.sections.verification import verification_section, verification_seed_noise
from fitting.report.view import StudyView, prepare_view

__all__ = ["Report", "write_report", "EXTRAPOLATION_SKIPPED"]

#: the ``skipped`` key (fits.json) of a first section that failed
EXTRAPOLATION_SKIPPED = "section extrapolation"


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
    stop_fraction: float | None = None,
    branch_plan: BudgetPlan | None = None,
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
        :mod:`fitting.report.sections.heldout`). An id that is not a run of the table raises FitError.
      mixture_constraints: for tables of 3 pairs or more, the constraints of the mixture-law
        recommendation (:mod:`fitting.report.sections.mixture`, ``fits.json["mixture"]``): keys
        ``max_weights`` {pair: w}, ``max_loss`` {pair: L}, ``preferences`` {pair: x},
        ``budget_examples`` and ``epoch_cap`` (epoch-cap weights from each pair's data_size).
      verification: the runs that trained the mixture recommendation and its baselines
        (:mod:`fitting.report.sections.verification`: size, seeds, mixtures, runs): removed from the
        table before every fit, reported in the section "Verification"
        (``fits.json["mixture"]["verification"]``).
      stop_fraction: the early stop's share of each run's steps (section "Early stop",
        :mod:`fitting.report.sections.early_stop`, ``fits.json["early_stop"]``); None: read from the
        table's stopped runs (none: no section). Given for a table of full runs, each run is cut
        at its stop as if stopped and every end checks its prediction.
    """
    if not isinstance(table, pd.DataFrame):
        table = read_table(table)
    view = prepare_view(table, eval_set=eval_set, metric=metric, drop_invalid=drop_invalid,
                        convergence_correction=convergence_correction,
                        heldout_runs=heldout_runs, verification=verification)
    os.makedirs(os.path.join(out_dir, "figures"), exist_ok=True)
    rep = Report(out_dir=out_dir, markdown_path=os.path.join(out_dir, "report.md"),
                 html_path=os.path.join(out_dir, "report.html"),
                 json_path=os.path.join(out_dir, "fits.json"), seeds=view.seeds)
    if view.n_dropped:
        rep.warnings.append(f"{view.n_dropped} final row(s) with invalid values were dropped")
    doc = Document()
    doc.h(1, title)
    _data_paragraphs(doc, view)
    first = len(doc.blocks)  # the extrapolation section goes here, once every law is fitted
    seeds_section(doc, rep.seeds)
    fit_kw = {"uncertainty": uncertainty, "n_refits": n_refits, "seed": seed}
    fit_size_laws(rep, view, **fit_kw)
    # the regime's fitted L∞: L(N, D)'s limit on cooled-down budgets where the table has them
    # (a pair it cannot fit has none: eq. 7's is this budget's, never in its place), else eq. 7's
    predicted = _predicted_budgets(rep, view, branch_plan)
    seed_noise = largest_size_seed_noises(rep.seeds)[0]
    cooled, cooled_note, cooled_why = fit_cooled_law(
        view, **fit_kw, noise_rel=seed_noise or None, predicted=predicted)
    _regime(doc, rep, view, cooled, cooled_why, ground_truth)
    cooled_law_section(doc, rep, cooled, cooled_note, cooled_why, ground_truth)
    power_section(doc, rep, view, out_dir)
    joint_section(doc, rep, view, ground_truth, out_dir)
    seed_sd = {pair: noise.sigma for pair, noise in seed_noise.items()}
    frontier_section(doc, rep, view, target_sizes, preferences, out_dir, uncertainty, n_refits,
                     seed, seed_sd)
    heldout_section(doc, rep, view)
    mixture = _mixture_sections(doc, rep, view, out_dir, target_sizes, mixture_constraints,
                                n_refits, seed)
    for name, section in (
            ("quality laws", lambda: quality_section(doc, rep, view, out_dir)),
            ("bivariate", lambda: bivariate_section(doc, rep, view.final, out_dir,
                                                    n_refits=min(n_refits, 30))),
            ("DPL", lambda: dpl_section(doc, rep, view.final, out_dir, **fit_kw)),
            ("L(N, D)", lambda: chinchilla_section(doc, rep, view, out_dir, **fit_kw))):
        try:
            section()
        except Exception as e:  # sections skip their own failures; anything else, said here
            rep.skipped[f"section {name}"] = f"{type(e).__name__}: {e}"
    _curves_figure(doc, rep, view, out_dir)
    curves = None
    try:
        curves = curves_section(doc, rep, view, out_dir)
    except Exception as e:  # the section skips its own failures; anything else, said here
        rep.skipped["section curve-law continuations"] = f"{type(e).__name__}: {e}"
    early = None
    try:
        early = early_stop_section(doc, rep, view, stop_fraction)
    except Exception as e:  # the section skips its own failures; anything else, said here
        rep.skipped["section early stop"] = f"{type(e).__name__}: {e}"
    ext = Document()
    try:
        rep.extrapolation = extrapolation_section(ext, rep, view, cooled, curves, mixture)
    except Exception as e:  # the section states its own rows' reasons; anything else, said here
        rep.skipped[EXTRAPOLATION_SKIPPED] = f"{type(e).__name__}: {e}"
    doc.blocks[first:first] = ext.blocks
    if rep.skipped:
        doc.h(2, "Skipped")
        doc.ul([f"{k}: {v}" for k, v in rep.skipped.items()])
    if rep.warnings:
        doc.h(2, "Warnings")
        doc.ul(rep.warnings)
    rep.markdown = doc.markdown()
    payload = _payload(rep, view, title, ground_truth, mixture)
    payload["curves"] = curves  # fitting.report.sections.curves: branch ends predicted and trained
    payload["early_stop"] = early  # fitting.report.sections.early_stop: predicted ends of stopped runs
    # Temporary names, then renames: a failed write (a full disk: io.NoSpaceError naming the
    # file) leaves a previous report's three files as they were.
    io.write_files_atomic({rep.markdown_path: rep.markdown, rep.html_path: doc.html(title),
                           rep.json_path: json.dumps(json_safe(payload), indent=1)})
    return rep


def _predicted_budgets(rep: Report, view: StudyView, plan: BudgetPlan | None
                       ) -> pd.DataFrame | None:
    """The cooled-down budgets not trained, predicted (:mod:`fitting.report.predicted_budgets`)
    where ``plan`` is given or the table has stopped runs; ``rep.chinchilla["predicted_budgets"]``
    lists them and the runs that could not be predicted. None otherwise."""
    if plan is None and table_stop_fraction(view.table_fit) is None:
        return None
    if not view.branches:
        return None
    try:
        rows, failed = predicted_budgets(view, plan)
    except FitError as e:  # the predictions never cost the report
        rep.skipped["predicted cooled-down budgets"] = str(e)
        return None
    cols = [c for c in ("run_id", "parent", "pair", "n", "weight", "step", "tokens", "value")
            if c in rows.columns]
    rep.chinchilla["predicted_budgets"] = {
        "rule": "LR-annealing law on the run's curve (fitting.report.predicted_budgets)",
        "points": rows[cols].to_dict("records") if len(rows) else [], "failed": failed}
    for key, why in failed.items():
        rep.skipped[f"predicted budget {key}"] = why
    return rows


def _data_paragraphs(doc: Document, view: StudyView) -> None:
    """What the report fits: runs, pairs, sizes, eval set and metric, held-out runs, branches,
    the convergence correction."""
    sizes, held_ids = view.sizes, view.held_ids
    fin_seeds = view.final_seeds
    n_runs = fin_seeds["run_id"].nunique() if "run_id" in fin_seeds.columns else len(fin_seeds)
    doc.p(f"Data: {n_runs} fitted runs, pairs {', '.join(view.points)}, {len(sizes)} model sizes "
          f"(N = {sizes[0]:.3g} … {sizes[-1]:.3g} non-embedding parameters), eval set "
          f"`{view.eval_set}`, metric `{view.metric}`, final values."
          + (f" Held out (trained, never fitted; predicted below): "
             f"{', '.join(f'`{r}`' for r in held_ids)}." if held_ids else "")
          + (f" {view.n_branch_runs} cool-down branches (Hägele et al. 2024) are left out of "
             "the size laws; their final losses give the regime and L(N, D) their cooled-down "
             "token budgets." if view.n_branch_runs else ""))
    if view.correction_step:
        doc.p(f"Convergence correction (Fernandes App. G): {view.n_corrected} final loss(es) of "
              f"runs with weight ≤ 0.05 replaced by their learning-curve extrapolation to step "
              f"{view.correction_step:g}.")


def _regime(doc: Document, rep: Report, view: StudyView, cooled, cooled_why: str,
            ground_truth: dict[str, float] | None) -> None:
    """``rep.regime`` (:func:`fitting.report.sections.regime.compute_regime` with the fitted L∞ of
    :func:`fitting.report.sections.regime.fitted_l_inf`) and its section."""
    lf = fitted_l_inf(list(view.points), branches=view.branches, cooled=cooled,
                      cooled_why=cooled_why, joint=rep.joint, power_fits=rep.power_fits,
                      lowest={pair: float(min(np.min(y) for _, y in by_w.values()))
                              for pair, by_w in view.shown.items() if by_w})
    rep.regime = compute_regime(view.table, view.final_all, lf["l_inf"], ground_truth,
                                view.eval_set, view.metric, lf["power"],
                                l_inf_budget=lf["budget"] if view.branches else None,
                                l_inf_info=lf["info"], budgets=view.budgets)
    rep.regime["l_inf_law"] = lf["law"]
    rep.regime["heldout_runs"] = view.held_ids
    regime_section(doc, rep.regime, heldout=bool(view.held_ids))


def _mixture_sections(doc: Document, rep: Report, view: StudyView, out_dir: str,
                      target_sizes, constraints, n_refits: int, seed: int) -> dict | None:
    """The K-pair mixture laws (:mod:`fitting.report.sections.mixture`) and the verification of their
    recommendation (:mod:`fitting.report.sections.verification`): ``fits.json["mixture"]``, None for
    fewer than 3 pairs without verification."""
    mixture = None
    plan, kw = view.verification, {"eval_set": view.eval_set, "metric": view.metric}
    try:  # None for fewer than 3 pairs: two-pair reports are unchanged
        mixture = mixture_section(doc, rep, view.table, out_dir, **kw,
                                  heldout_runs=view.held_ids, target_sizes=target_sizes,
                                  constraints=constraints, n_boot=min(n_refits, 100),
                                  seed=seed, seed_noise=verification_seed_noise(
                                      view.verify_rows, plan, **kw, final=view.verify_final))
    except Exception as e:  # the section skips its own failures; anything else, said here
        rep.skipped["section mixture laws"] = f"{type(e).__name__}: {e}"
    try:
        checked = verification_section(doc, rep, view.verify_rows, mixture, plan,
                                       rep.mixture_laws, **kw, final=view.verify_final)
        if checked is not None:
            mixture = {**(mixture or {}), "verification": checked}
    except Exception as e:  # the section states its own skips; anything else, said here
        rep.skipped["section verification"] = f"{type(e).__name__}: {e}"
    return mixture


def _payload(rep: Report, view: StudyView, title: str, ground_truth: dict[str, float] | None,
             mixture: dict | None) -> dict:
    """``fits.json``: every section's numbers."""
    payload = {
        "title": title, "eval_set": view.eval_set, "metric": view.metric,
        "ground_truth": ground_truth, "extrapolation": rep.extrapolation or None,
        "regime": rep.regime, "skipped": rep.skipped,
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
        "heldout_runs": view.held_ids,
        "heldout": rep.heldout,
        "seeds": rep.seeds,
        "dpl": rep.dpl or None,
        "chinchilla": rep.chinchilla or None,
        "bivariate": rep.bivariate or None,
    }
    if mixture is not None:
        payload["mixture"] = mixture
    return payload


def _curves_figure(doc: Document, rep: Report, view: StudyView, out_dir: str) -> None:
    """The learning curves of every trained run (held-out runs included), one panel per pair,
    with the cool-down branches' final losses."""
    table, eval_set, metric = view.table, view.eval_set, view.metric
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
