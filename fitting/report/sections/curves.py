"""The report's section "Training curves and curve-law continuations": per pair and fitted parent
run with cool-down branches, the LR-annealing law (Tissue et al. 2024 eq. 1, in the form
:data:`CURVE_FORM` with momentum :data:`CURVE_LAMBDA`) fitted on the parent's stable phase and one
branch predicts the cooled-down ends of the others (:func:`fitting.laws.curves.branches.
predict_branch_ends`), each judged by the report's one rule
(:func:`fitting.report.sections.extrapolation.judge`) against the scatter of the quantity
predicted: a probe loss's per-point scatter, else the evaluation loss's seed noise.
``fits.json["curves"]``: the settings, ``pairs[pair]`` and ``skipped``. The first section's row
"later cool-down" reads its errors. What is fitted on which points, why a branch enters the fit
and how the settings were chosen: docs/reference/laws.md, "Training curves and curve-law
continuations".
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from fitting import plots
from fitting.core.base import FitError
from fitting.laws.curves.branches import BranchPredictions, branch_families, predict_branch_ends
from fitting.laws.curves.joint_fit import CurveFitOptions
from fitting.laws.curves.learning_curve import cooldown_start
from fitting.laws.curves.runs import (
    PROBE_METRIC,
    TIDY_LR_METRIC,
    Curve,
    curve_loss_metric,
    curves_from_table,
    pair_training_curves,
)
from fitting.report.markdown import Document
from fitting.report.record import Report
from fitting.report.sections.chinchilla import largest_size_seed_noises
from fitting.report.sections.extrapolation import (
    CURVE_FORM,
    CURVE_LAMBDA,
    FROM_FRACTION,
    NOISE_MULTIPLE,
    judge,
    point_scatter,
    relative_errors,
)
from fitting.report.view import StudyView

__all__ = ["FIT_BRANCHES", "MAX_FAMILIES", "MAX_POINTS",
           "FIGURE_FAMILIES", "curve_continuations", "curves_section", "evaluated_ends",
           "loss_description", "family_residuals"]

#: the branch of each family in the fit (``predict_branch_ends``' ``fit_branches``)
FIT_BRANCHES = "middle"
#: families (parents) fitted per pair, spread over the model sizes: one fit each
MAX_FAMILIES = 6
#: losses per curve in a fit (evenly spaced in step)
MAX_POINTS = 60
#: families drawn per pair in the figure (one row of panels per pair: drawing is the section's
#: largest cost after the fits)
FIGURE_FAMILIES = 2
_KEY = "curve-law continuations"
_LOSS = "training loss of the pair, read at its logged step"
_PROBE_LOSS = "probe loss of the pair (the same examples of its eval set at every probe step)"


def loss_description(metric: str) -> str:
    """What a curve of ``metric`` (:func:`fitting.laws.curves.runs.curve_loss_metric`) is, in
    the report's words."""
    return _PROBE_LOSS if metric == PROBE_METRIC else _LOSS


def _spread(parents: list[str], curves: dict[str, Curve], k: int) -> list[str]:
    """At most ``k`` of ``parents``, evenly spaced in (size, run id)."""
    ranked = sorted(parents, key=lambda p: (np.nan_to_num(curves[p].n, nan=0.0), p))
    if len(ranked) <= k:
        return ranked
    return [ranked[i] for i in np.unique(np.round(np.linspace(0, len(ranked) - 1, k)).astype(int))]


def _family(curves: dict[str, Curve], parent: str, branches: list[str], lam: float,
            targets: dict[str, Curve] | None = None
            ) -> tuple[BranchPredictions, float | None, float]:
    """The fit and predictions of one family: the parent up to its cool-down and the middle
    branch, from :data:`FROM_FRACTION` of the parent's steps on; ``targets`` the losses its ends
    are judged on (None: the fitted curves')."""
    par = curves[parent]
    if not par.steps.size:
        raise FitError(f"parent {parent!r} has no loss of the pair", column="loss")
    stable = cooldown_start(par.lr_steps, par.lr)
    start = FROM_FRACTION * float(par.steps.max())
    fam = {r: curves[r] for r in [parent, *branches]}
    tg = None if targets is None else {r: targets[r] for r in fam if r in targets}
    res = predict_branch_ends(fam, law="lr_annealing", stable_until=stable,
                              fit_branches=FIT_BRANCHES, targets=tg,
                              options=CurveFitOptions(from_step=start, max_points=MAX_POINTS),
                              law_params={"lam": lam, "form": CURVE_FORM})
    if parent in res.failed:
        raise FitError(res.failed[parent], column="loss")
    return res, stable, start


def evaluated_ends(view: StudyView, pair: str, curves: dict[str, Curve]) -> dict[str, Curve]:
    """{run: its evaluation loss of ``pair``} (the report's metric on its eval set) for the runs
    of ``curves`` evaluated at their last training step: the ends the section judges."""
    table = view.table_fit
    rows = table[table["run_id"].astype(str).isin(curves)]
    try:
        ev = curves_from_table(rows, loss_metric=view.metric, pair=pair, eval_set=view.eval_set,
                               loss_window=0, source="report")
    except FitError:
        return {}
    return {r: c for r, c in ev.items() if r in curves and c.steps.size and curves[r].steps.size
            and c.steps[-1] >= curves[r].steps[-1]}


def _continuation(res: BranchPredictions, curves: dict[str, Curve], parent: str,
                  stable: float | None, start: float) -> list[dict[str, Any]]:
    """For the figure: each run's measured curve from ``start`` and the law from where it
    leaves what was fitted (a branch: its branch step; the parent: its cool-down) to its end."""
    fit = res.fits[parent]
    ends = {e.run: e for e in res.ends if e.parent == parent or e.run == parent}
    out = []
    for run, e in ends.items():
        c = curves[run]
        keep = c.steps >= start
        first = c.branch_step if c.parent else (stable if stable is not None else start)
        grid = np.linspace(first + 1, e.step, 40)
        out.append({"label": "parent" if run == parent else f"branch at {c.branch_step:g}",
                    "steps": c.steps[keep], "loss": c.loss[keep], "pred_steps": grid,
                    "pred": fit.predict(grid, c.lr_steps, c.lr), "fitted": e.fitted,
                    "end": (e.step, e.measured, e.predicted)})
    return out


def family_residuals(fit: Any, curves: dict[str, Curve], parent: str, stable: float | None,
                      start: float) -> list[float]:
    """The family fit's relative residuals on the losses it was fitted on: the parent's from
    ``start`` to ``stable`` (its cool-down's start), the fitted branches' from ``start``."""
    out: list[float] = []
    for run in fit.runs:
        c = curves[run]
        mask = c.steps >= start
        if run == parent and stable is not None:
            mask &= c.steps <= stable
        out += relative_errors(fit, c, mask)
    return out


def _pair(view: StudyView, pair: str, lam: float) -> tuple[dict[str, Any], dict[str, list]]:
    """``fits.json["curves"]["pairs"][pair]`` and the figure's panels {title: runs}."""
    curves = pair_training_curves(view.table_fit, pair)
    metric = curve_loss_metric(view.table_fit, pair)
    # None: judged on the fitted curve's own loss at each end (the probe loss, or, where the
    # runs were not evaluated at their ends, the training loss)
    targets = None if metric == PROBE_METRIC else evaluated_ends(view, pair, curves) or None
    fams = {p: [b for b in bs if curves[b].steps.size and (targets is None or b in targets)]
            for p, bs in branch_families(curves).items()}
    fams = {p: bs for p, bs in fams.items() if bs}
    if not fams:
        raise FitError("no parent run with a cool-down branch trains the pair",
                       column="parent_run")
    chosen = _spread(list(fams), curves, MAX_FAMILIES)
    families, failed, ends, panels = {}, {}, [], {}
    scatter: list[tuple[list[float], int]] = []
    shown = set(_spread(chosen, curves, FIGURE_FAMILIES))
    for parent in chosen:
        try:
            res, stable, start = _family(curves, parent, fams[parent], lam, targets)
        except FitError as e:
            failed[parent] = str(e)
            continue
        fit = res.fits[parent]
        scatter.append((family_residuals(fit, curves, parent, stable, start),
                        len(fit.params)))
        families[parent] = {"n": curves[parent].n, "stable_until": stable, "from_step": start,
                            "fitted_runs": fit.runs, "params": fit.params,
                            "warnings": fit.warnings}
        ends += [{"run": e.run, "parent": parent, "branch_step": e.branch_step, "step": e.step,
                  "measured": e.measured, "predicted": e.predicted, "error": e.error,
                  "fitted": e.fitted} for e in res.ends]
        if parent in shown:
            panels[f"{pair}: {parent}"] = _continuation(res, curves, parent, stable, start)
    if not families:
        raise FitError("no family could be fitted: " + "; ".join(
            f"{p}: {w}" for p, w in failed.items()), column="loss")
    errors = [e["error"] for e in ends if not e["fitted"]]
    noise = (largest_size_seed_noises(view.seeds)[0].get(pair) if targets is not None else
             point_scatter(scatter, f"per-point scatter of the fitted steps "
                           f"({loss_description(metric)})"))
    judged = (loss_description(metric) if targets is None
              else f"{view.eval_set} {view.metric} of the pair")
    return ({"n_families": len(families), "n_families_total": len(fams), "families": families,
             "loss": loss_description(metric), "metric": metric, "judged_on": judged,
             "failed": failed, "ends": ends, "errors": errors,
             "sigma_source": "" if noise is None else noise.source,
             **judge(errors, None if noise is None else noise.sigma,
                     "" if errors else "every end was in a fit",
                     dof=None if noise is None else noise.dof,
                     seeds=None if noise is None else noise.seeds)},
            panels)


def curve_continuations(view: StudyView, *, lam: float = CURVE_LAMBDA
                        ) -> tuple[dict[str, Any] | None, dict[str, list]]:
    """(``fits.json["curves"]``, the figure's panels): the section's fits and predictions
    (module docstring); (None, {}) for a table without cool-down branches or learning rates."""
    table = view.table_fit
    if not view.branches or "metric" not in table.columns or not (
            table["metric"] == TIDY_LR_METRIC).any():
        return None, {}
    out: dict[str, Any] = {"law": "lr_annealing", "form": CURVE_FORM, "lam": float(lam),
                           "fit_branches": FIT_BRANCHES, "loss": "",
                           "from_fraction": FROM_FRACTION, "max_families": MAX_FAMILIES,
                           "max_points": MAX_POINTS, "noise_multiple": NOISE_MULTIPLE,
                           "pairs": {}, "skipped": {}}
    panels: dict[str, list] = {}
    for pair in view.points:
        try:
            out["pairs"][pair], got = _pair(view, pair, lam)
            panels.update(got)
        except FitError as e:
            out["skipped"][pair] = str(e)
    out["loss"] = " / ".join(sorted({d["loss"] for d in out["pairs"].values()})) or _LOSS
    return out, panels


def _pct(x: float | None) -> str:
    return "–" if x is None or not np.isfinite(x) else f"{x:.2%}"


def _ylabel(out: dict[str, Any]) -> str:
    """The figure's loss: "probe loss" when every pair's curve is its probe loss."""
    metrics = {d["metric"] for d in out["pairs"].values()}
    return "probe loss" if metrics == {PROBE_METRIC} else "training loss"


def curves_section(doc: Document, rep: Report, view: StudyView, out_dir: str, *,
                   lam: float = CURVE_LAMBDA) -> dict[str, Any] | None:
    """Write the section into ``doc`` (figure ``figures/curve_continuations.png``) and return
    ``fits.json["curves"]`` (:func:`curve_continuations`); None, with the reason in
    ``rep.skipped``, where the table has no cool-down branches or learning rates."""
    out, panels = curve_continuations(view, lam=lam)
    if out is None:
        rep.skipped[_KEY] = ("the table has no cool-down branches with learning_rate rows "
                             "(the curve laws need each run's schedule)")
        return None
    for pair, why in out["skipped"].items():
        rep.skipped[f"{_KEY} {pair}"] = why
    if not out["pairs"]:
        return out
    doc.h(2, "Training curves and curve-law continuations")
    form = ("(L0 + A·S1^−α)·exp(−C·S2) (the relative form of Tissue et al. 2024, eq. 1: the "
            "gain of a cool-down is a share of the loss)" if CURVE_FORM == "relative" else
            "L0 + A·S1^−α − C·S2 (Tissue et al. 2024, eq. 1)")
    judged = sorted({d["judged_on"] for d in out["pairs"].values()})
    doc.p(f"Per pair and parent run, the LR-annealing law L(s) = {form}, annealing momentum "
          f"λ = {lam:g}, is fitted on the {out['loss']} — the "
          "parent's up to the start of its own cool-down and its middle cool-down branch's, "
          f"from {FROM_FRACTION:.0%} of the parent's steps on — and predicts, from their "
          "learning-rate schedules, the cooled-down ends of the other branches and of the "
          "parent (Hägele et al. 2024), each judged against the " + " / ".join(judged) + " at "
          "its end: can a cool-down at another step be predicted instead of "
          "trained? Verdict: the report's rule (RMSE within k·σ, σ the noise of the quantity "
          "predicted — for probe-loss ends the per-point scatter the family fits leave on "
          "their fitted steps, for evaluated ends the relative seed sd at the largest size "
          f"repeated —, k = {NOISE_MULTIPLE:g} or Student's t on σ's dof where wider; "
          "information without σ, or where a seed sd rests on fewer than 3 seeds). At "
          f"most {MAX_FAMILIES} parents per pair are fitted, spread over the sizes.")
    doc.table(["pair", "parents fitted", "ends predicted", "median |error|", "worst |error|",
               "RMSE", "σ", "k·σ", "verdict"],
              [[pair, f"{d['n_families']} of {d['n_families_total']}", str(d["n_points"]),
                _pct(d["median"]), _pct(d["worst"]), _pct(d["rmse"]),
                _pct(d["sigma"]) + ("" if d.get("sigma_dof") is None else
                                    f" ({d.get('sigma_seeds')} seeds, {d['sigma_dof']} dof)"),
                _pct(d["three_sigma"]), d["verdict"]] for pair, d in out["pairs"].items()])
    failed = [f"{pair} {p}: {w}" for pair, d in out["pairs"].items()
              for p, w in d["failed"].items()]
    if failed:
        doc.p("Not fitted: " + "; ".join(failed) + ".")
    try:
        rep.figures["curve_continuations"] = plots.save(
            plots.plot_curve_continuations(panels, ylabel=_ylabel(out),
                                           ncols=FIGURE_FAMILIES),
            os.path.join(out_dir, "figures", "curve_continuations.png"))
        doc.img("figures/curve_continuations.png", f"{_ylabel(out).capitalize()} of each "
                "parent and its "
                "cool-down branches (solid), the fitted law's continuation from each branch "
                "step and from the parent's cool-down (dashed; the fitted branch dotted), "
                "trained ends (triangles: the loss each end is judged on) and predicted ends "
                "(crosses).")
    except Exception as e:
        rep.skipped["figures (curve-law continuations)"] = f"{type(e).__name__}: {e}"
    return out
