"""Study report: fitted laws with uncertainty, regime, figures — Markdown, HTML, PNG and JSON.

:func:`write_report` takes the tidy table (docs/reference/metrics_schema.md), a folder and one
:class:`~fitting.report.options.ReportOptions`; it prepares the view
(:mod:`fitting.report.view`), runs the sections of :data:`SECTIONS` in order and then those
registered from outside (:func:`fitting.report.section.register_section`), each into its own
document with the one error boundary here, and writes ``report.md``, ``report.html``,
``fits.json`` and ``figures/*.png`` (the text files under temporary names, then renamed: a
failed write leaves a previous report whole). What each section fits and shows is in its module
(:mod:`fitting.report.sections`); held-out runs and cool-down branches: :mod:`fitting.report.view`.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from fitting import plots
from fitting.core.base import FitError, json_safe
from fitting.data import io
from fitting.data.tables import is_branch, read_table, without_branches
from fitting.report.markdown import Document
from fitting.report.options import ReportOptions
from fitting.report.predicted_budgets import BudgetPlan, predicted_budgets
from fitting.report.record import Report
from fitting.report.section import ReportSection, Section, SectionRun, registered_sections
from fitting.report.sections.bivariate import bivariate_section
from fitting.report.sections.chinchilla import (
    chinchilla_section,
    cooled_law_section,
    fit_cooled_law,
    largest_size_seed_noises,
)
from fitting.report.sections.curves import curves_section
from fitting.report.sections.design_rounds import design_rounds_section
from fitting.report.sections.dpl import dpl_section
from fitting.report.sections.early_stop import early_stop_section, table_stop_fraction
from fitting.report.sections.extrapolation import extrapolation_section
from fitting.report.sections.frontier import frontier_section
from fitting.report.sections.heldout import heldout_section
from fitting.report.sections.mixture import mixture_section
from fitting.report.sections.quality import quality_section
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

__all__ = ["Report", "ReportOptions", "write_report", "SECTIONS", "EXTRAPOLATION_SKIPPED"]

#: the ``skipped`` key (fits.json) of a first section that failed
EXTRAPOLATION_SKIPPED = "section extrapolation"


def write_report(table: pd.DataFrame | str, out_dir: str, options: ReportOptions | None = None
                 ) -> Report:
    """Fit the laws to ``table``'s final losses (a DataFrame, or a CSV/Parquet path) and write
    the report into ``out_dir``, as ``options`` asks (default :class:`ReportOptions`)."""
    options = options or ReportOptions()
    if not isinstance(table, pd.DataFrame):
        table = read_table(table)
    view = prepare_view(table, eval_set=options.eval_set, metric=options.metric,
                        drop_invalid=options.drop_invalid,
                        convergence_correction=options.convergence_correction,
                        heldout_runs=options.heldout_runs, verification=options.verification)
    os.makedirs(os.path.join(out_dir, "figures"), exist_ok=True)
    rep = Report(out_dir=out_dir, markdown_path=os.path.join(out_dir, "report.md"),
                 html_path=os.path.join(out_dir, "report.html"),
                 json_path=os.path.join(out_dir, "fits.json"), seeds=view.seeds)
    if view.n_dropped:
        rep.warnings.append(f"{view.n_dropped} final row(s) with invalid values were dropped")
    doc = Document()
    doc.h(1, options.title)
    _data_paragraphs(doc, view)
    run = SectionRun(doc=doc, rep=rep, view=view, options=options, out_dir=out_dir)
    sections = (*SECTIONS, *registered_sections())
    docs = {section.name: _run_section(section, run) for section in sections}
    for lead in (True, False):
        for section in sections:
            if getattr(section, "lead", False) is lead:
                doc.blocks += docs[section.name].blocks
    if rep.skipped:
        doc.h(2, "Skipped")
        doc.ul([f"{k}: {v}" for k, v in rep.skipped.items()])
    if rep.warnings:
        doc.h(2, "Warnings")
        doc.ul(rep.warnings)
    rep.markdown = doc.markdown()
    payload = _payload(rep, view, options.title, options.ground_truth, _mixture(run))
    for section in sections:
        if (key := getattr(section, "json_key", None)) is not None:
            payload[key] = run.payloads.get(section.name)
    # Temporary names, then renames: a failed write (a full disk: io.NoSpaceError naming the
    # file) leaves a previous report's three files as they were.
    io.write_files_atomic({rep.markdown_path: rep.markdown, rep.html_path: doc.html(options.title),
                           rep.json_path: json.dumps(json_safe(payload), indent=1)})
    return rep


def _run_section(section: Section, run: SectionRun) -> Document:
    """Run ``section`` into a document of its own (returned); its payload into
    ``run.payloads``. The one error boundary: a failure is listed under "Skipped" (a section
    states its own skips; anything else is said here), unless the section is required."""
    run.doc = Document()
    try:
        run.payloads[section.name] = section.run(run)
    except Exception as e:
        if getattr(section, "required", False):
            raise
        run.rep.skipped[f"section {section.name}"] = f"{type(e).__name__}: {e}"
    return run.doc


# -- the built-in sections, in the order they run (each reads the payloads before it) ----------


def _seeds(run: SectionRun) -> None:
    seeds_section(run.doc, run.rep.seeds)


def _size_laws(run: SectionRun) -> None:
    fit_size_laws(run.rep, run.view, uncertainty=run.options.uncertainty)


def _budgets(run: SectionRun) -> pd.DataFrame | None:
    return _predicted_budgets(run.rep, run.view, run.options.branch_plan)


def _cooled_fit(run: SectionRun) -> tuple:
    """L(N, D) across weights on cooled-down budgets: (fit or None, note, why not)."""
    seed_noise = largest_size_seed_noises(run.rep.seeds)[0]
    return fit_cooled_law(run.view, uncertainty=run.options.uncertainty,
                          noise_rel=seed_noise or None,
                          predicted=run.payloads.get("predicted budgets"))


def _regime_run(run: SectionRun) -> None:
    # the regime's fitted L∞: L(N, D)'s limit on cooled-down budgets where the table has them
    # (a pair it cannot fit has none: eq. 7's is this budget's, never in its place), else eq. 7's
    cooled, _, why = run.payloads[COOLED_FIT]
    _regime(run.doc, run.rep, run.view, cooled, why, run.options.ground_truth)


def _cooled_law(run: SectionRun) -> None:
    cooled, note, why = run.payloads[COOLED_FIT]
    cooled_law_section(run.doc, run.rep, cooled, note, why, run.options.ground_truth)


def _power(run: SectionRun) -> None:
    power_section(run.doc, run.rep, run.view, run.out_dir)


def _joint(run: SectionRun) -> None:
    joint_section(run.doc, run.rep, run.view, run.options.ground_truth, run.out_dir)


def _frontier(run: SectionRun) -> None:
    o = run.options
    seed_sd = {pair: noise.sigma
               for pair, noise in largest_size_seed_noises(run.rep.seeds)[0].items()}
    frontier_section(run.doc, run.rep, run.view, o.target_sizes, o.preferences, run.out_dir,
                     o.uncertainty, seed_sd)


def _heldout(run: SectionRun) -> None:
    heldout_section(run.doc, run.rep, run.view)


def _mixture_laws(run: SectionRun) -> dict | None:
    """The K-pair mixture laws (None for fewer than 3 pairs: two-pair reports are unchanged)."""
    view, o = run.view, run.options
    kw = {"eval_set": view.eval_set, "metric": view.metric}
    return mixture_section(run.doc, run.rep, view.table, run.out_dir, **kw,
                           heldout_runs=view.held_ids, target_sizes=o.target_sizes,
                           constraints=o.mixture_constraints, n_boot=min(o.uncertainty.n_refits, 100),
                           seed=o.uncertainty.seed, seed_noise=verification_seed_noise(
                               view.verify_rows, view.verification, **kw,
                               final=view.verify_final))


def _verification(run: SectionRun) -> dict | None:
    view = run.view
    return verification_section(run.doc, run.rep, view.verify_rows,
                                run.payloads.get("mixture laws"), view.verification,
                                run.rep.mixture_laws, eval_set=view.eval_set,
                                metric=view.metric, final=view.verify_final)


def _mixture(run: SectionRun) -> dict | None:
    """``fits.json["mixture"]``: the mixture laws with the verification of their
    recommendation; None for fewer than 3 pairs without verification."""
    mixture, checked = run.payloads.get("mixture laws"), run.payloads.get("verification")
    return mixture if checked is None else {**(mixture or {}), "verification": checked}


def _quality(run: SectionRun) -> None:
    quality_section(run.doc, run.rep, run.view, run.out_dir)


def _bivariate(run: SectionRun) -> None:
    bivariate_section(run.doc, run.rep, run.view.final, run.out_dir,
                      n_refits=min(run.options.uncertainty.n_refits, 30))


def _dpl(run: SectionRun) -> None:
    dpl_section(run.doc, run.rep, run.view.final, run.out_dir,
                uncertainty=run.options.uncertainty)


def _chinchilla(run: SectionRun) -> None:
    chinchilla_section(run.doc, run.rep, run.view, run.out_dir,
                       uncertainty=run.options.uncertainty)


def _learning_curves(run: SectionRun) -> None:
    _curves_figure(run.doc, run.rep, run.view, run.out_dir)


def _curves(run: SectionRun) -> dict | None:
    return curves_section(run.doc, run.rep, run.view, run.out_dir)


def _early_stop(run: SectionRun) -> dict | None:
    return early_stop_section(run.doc, run.rep, run.view, run.options.stop_fraction)


def _design_rounds(run: SectionRun) -> dict | None:
    records = run.options.design_rounds
    cooled = run.payloads[COOLED_FIT][0]
    pair = records[0].get("pair") if records else None
    report_e = ((cooled.meta.get("E_predictive") or {}).get(pair)
                if cooled is not None and pair else None)
    return design_rounds_section(run.doc, records, run.out_dir, report_e)


def _extrapolation(run: SectionRun) -> dict:
    """The first section, run last: every law it judges is fitted by then."""
    run.rep.extrapolation = extrapolation_section(
        run.doc, run.rep, run.view, run.payloads[COOLED_FIT][0],
        run.payloads.get("curve-law continuations"), _mixture(run))
    return run.rep.extrapolation


#: the payload name of L(N, D) across weights' fit, which later sections read
COOLED_FIT = "L(N, D) across weights fit"

#: the report's sections, in the order they run; a failure of a required one fails the report
SECTIONS: tuple[ReportSection, ...] = (
    ReportSection("seeds", _seeds, required=True),
    ReportSection("size laws", _size_laws, required=True),
    ReportSection("predicted budgets", _budgets, required=True),
    ReportSection(COOLED_FIT, _cooled_fit, required=True),
    ReportSection("regime", _regime_run, required=True),
    ReportSection("L(N, D) across weights", _cooled_law, required=True),
    ReportSection("power law", _power, required=True),
    ReportSection("joint law", _joint, required=True),
    ReportSection("frontier", _frontier, required=True),
    ReportSection("held-out runs", _heldout, required=True),
    ReportSection("design rounds", _design_rounds, json_key="design_rounds"),
    ReportSection("mixture laws", _mixture_laws),
    ReportSection("verification", _verification),
    ReportSection("quality laws", _quality),
    ReportSection("bivariate", _bivariate),
    ReportSection("DPL", _dpl),
    ReportSection("L(N, D)", _chinchilla),
    ReportSection("learning curves", _learning_curves, required=True),
    ReportSection("curve-law continuations", _curves, json_key="curves"),
    ReportSection("early stop", _early_stop, json_key="early_stop"),
    ReportSection("extrapolation", _extrapolation, lead=True),
)


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
