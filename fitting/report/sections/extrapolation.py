"""The report's first section: how far its predictions can be trusted.

One row per (extrapolation, pair), each a prediction of points that no fit saw — ``larger
size`` (:data:`LARGER_SIZE`: the leave-largest-size-out backtest of the law the report leads
with), ``held-out run`` (:data:`HELDOUT_RUN`), ``longer run`` (:data:`LONGER_RUN`: the last
third of each curve by the LR-annealing law) and ``later cool-down`` (:data:`LATER_COOLDOWN`:
branch ends no fit saw) — judged by :func:`judge`, the one rule: the RMSE within k·σ, σ the
noise of the quantity predicted (a cooled end's seed sd, or for per-step curve points the
per-point scatter of the fitted steps, :func:`point_scatter`), k = 3 or Student's t on σ's dof
where wider; information where σ is missing or rests on fewer than 3 seeds. Rows with
intervals carry their coverage over calibrated intervals only and what they were calibrated on.
The rows, fields and sentences: docs/guides/fitting.md, "How far the predictions can be trusted".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.core.seed_noise import (
    FEW_SEEDS,
    MIN_DOF,
    SeedNoise,
    few_seeds_verdict,
    judges,
    judging_multiple,
    noise_fields,
)
from fitting.data.seeds import run_mixtures
from fitting.intervals.cooled_law import LEAVE_ONE_RUN_OUT
from fitting.intervals.predictive import coverage_of_marks
from fitting.laws.budget.chinchilla_joint import JointChinchillaFit
from fitting.laws.curves.annealing import fit_annealing_law
from fitting.laws.curves.joint_fit import CurveFitOptions
from fitting.laws.curves.runs import (
    PROBE_METRIC,
    Curve,
    curve_loss_metric,
    curves_from_table,
    pair_training_curves,
)
from fitting.report.markdown import Document
from fitting.report.record import Report
from fitting.report.sections.chinchilla import COOLED_LAW, largest_size_seed_noises
from fitting.report.sections.heldout import NOISE_TOLERANCE as HELDOUT_NOISE_TOLERANCE
from fitting.report.sections.heldout import REL_TOLERANCE
from fitting.report.sections.verification import verification_seed_noise
from fitting.report.view import StudyView

__all__ = ["LARGER_SIZE", "HELDOUT_RUN", "LONGER_RUN", "LATER_COOLDOWN", "NOISE_MULTIPLE",
           "HOLDS", "FAILS", "NO_NOISE", "FEW_SEEDS", "FIT_FRACTION", "FROM_FRACTION", "CURVE_LAMBDA", "CURVE_FORM",
           "longer_run_errors", "point_scatter", "relative_errors",
           "judge",
           "last_third_backtest", "last_third_fit", "SEED_NOISE_SOURCES",
           "extrapolation_rows", "extrapolation_section"]

LARGER_SIZE = "larger size"
HELDOUT_RUN = "held-out run"
LONGER_RUN = "longer run"
LATER_COOLDOWN = "later cool-down"
#: a prediction holds when its RMSE lies within this many seed sds
NOISE_MULTIPLE = 3.0
HOLDS, FAILS = "holds", "does not hold"
NO_NOISE = "information: no seed noise measured"
#: the ``noise_source`` of a held-out mixture entry (``fits.json["mixture"]["heldout"]``) whose
#: ``noise`` is a seed noise: the study's pooled one at its size, or its own seeds' spread
SEED_NOISE_SOURCES = ("pooled seed sd", "seed spread")
#: the share of each run's steps the curve law is fitted on (the rest is predicted)
FIT_FRACTION = 2.0 / 3.0
#: λ of the annealing momentum (Tissue et al. eq. 1's S2): 0.8 predicts the main job's
#: 50–80-step cool-downs far better than their 0.999 (benchmarks/studies/curve_laws_main_job.py)
CURVE_LAMBDA = 0.8
#: the form of the LR-annealing law (:data:`fitting.laws.curves.annealing.ANNEALING_FORMS`):
#: "relative", (L0 + A·S1^−α)·exp(−C·S2), follows the main job's cool-down gains, which shrink
#: with the loss, where eq. 1's fixed gain C·S2 does not (benchmarks/studies/curve_laws_main_job.py)
CURVE_FORM = "relative"
#: the first step fitted, as a share of the parent's last loss step: the first steps after the
#: warm-up fall faster than the law
FROM_FRACTION = 0.4
_WHAT = {LARGER_SIZE: "Predictions at larger sizes", HELDOUT_RUN: "Predictions of unseen runs "
         "(size and weight)", LONGER_RUN: "Predictions of longer runs",
         LATER_COOLDOWN: "Predictions of cool-downs at other steps"}


def judge(errors: Sequence[float] | None, sigma: float | None, why: str = "", *,
          dof: int | None = None, seeds: int | None = None) -> dict[str, Any]:
    """The report's one rule for a prediction of unseen points against the seed noise:
    ``rmse``, ``worst`` and ``median`` |relative error| of ``errors`` ((predicted − measured) /
    measured), ``n_points``, ``multiple`` (:func:`fitting.core.seed_noise.judging_multiple`:
    3, wider on a σ of 2 or 3 dof), ``three_sigma`` (multiple × σ), σ's ``sigma_seeds``,
    ``sigma_dof`` and
    ``sigma_ci90`` (:func:`fitting.core.seed_noise.noise_fields`) and the ``verdict`` —
    :data:`HOLDS` when the RMSE is within :data:`NOISE_MULTIPLE` × ``sigma`` (the relative seed
    sd, measured on ``seeds`` runs with ``dof`` degrees of freedom), :data:`FAILS` otherwise;
    information where ``sigma`` rests on fewer than 3 seeds (``dof`` < :data:`fitting.core.
    seed_noise.MIN_DOF`, or not given: :func:`fitting.core.seed_noise.few_seeds_verdict`) and
    :data:`NO_NOISE` without ``sigma``; "not computed: ``why``" without errors."""
    multiple = judging_multiple(dof, NOISE_MULTIPLE)
    out: dict[str, Any] = {"sigma": sigma, "multiple": multiple,
                           "three_sigma": None if sigma is None else multiple * sigma,
                           **noise_fields(seeds, dof, sigma)}
    if why or errors is None or not len(errors):
        return {**out, "rmse": None, "worst": None, "median": None, "n_points": 0,
                "verdict": f"not computed: {why or 'no point predicted'}"}
    e = np.abs(np.asarray(errors, dtype=float))
    rmse = float(np.sqrt(np.mean(e ** 2)))
    verdict = (NO_NOISE if sigma is None else few_seeds_verdict(seeds, dof) if not judges(dof)
               else HOLDS if rmse <= multiple * sigma else FAILS)
    return {**out, "rmse": rmse, "worst": float(e.max()), "median": float(np.median(e)),
            "n_points": int(e.size), "verdict": verdict}


def _row(kind: str, pair: str, law: str, errors: list[float] | None, noise: SeedNoise | None,
         why: str = "", detail: str = "") -> dict[str, Any]:
    """One row: errors are relative, (predicted − measured) / measured, judged against
    ``noise`` (relative σ_seed, its seeds, dof and source); ``why``: not computed."""
    if noise is None:
        return {"kind": kind, "pair": pair, "law": law, "detail": detail, "sigma_source": "",
                **judge(errors, None, why)}
    return {"kind": kind, "pair": pair, "law": law, "detail": detail,
            "sigma_source": noise.source,
            **judge(errors, noise.sigma, why, dof=noise.dof, seeds=noise.seeds)}


def _sigma(view: StudyView) -> dict[str, SeedNoise]:
    """{pair: (σ_seed relative to the loss, where it was measured)}: the pair's seed sd at the
    largest size the study repeated (:func:`fitting.report.sections.chinchilla.largest_size_seed_noise`);
    for a pair without repeated design runs, the seed noise its verification runs measured
    (:func:`fitting.report.sections.verification.verification_seed_noise`, pooled over the mixtures
    trained with the same seeds at one size — the σ of the section Mixture laws for K pairs),
    at the largest size it covers. Pairs with neither are absent (not judged). Each σ carries
    its seeds and dof (pooled: summed over the groups pooled)."""
    out: dict[str, SeedNoise] = {}
    pooled = verification_seed_noise(view.verify_rows, view.verification,
                                     eval_set=view.eval_set, metric=view.metric,
                                     final=view.verify_final)
    for (pair, n), v in sorted(pooled.items(), key=lambda kv: kv[0][1]):  # largest N last
        out[pair] = SeedNoise(float(v["relative_sd"]), int(v["dof"]) + int(v["mixtures"]),
                              int(v["dof"]), f"pooled seed sd of the verification runs at "
                              f"N = {n:.3g} ({v['mixtures']} mixtures, {v['dof']} dof)")
    out.update(largest_size_seed_noises(view.seeds)[0])
    return out


def _judged_row(kind: str, pair: str, law: str, errors: list[float] | None,
                sigma: dict[str, SeedNoise], why: str = "", detail: str = ""
                ) -> dict[str, Any]:
    """:func:`_row` with the pair's σ_seed of :func:`_sigma` (None where none was measured)."""
    return _row(kind, pair, law, errors, sigma.get(pair), why, detail)


def _no_size_backtest(rep: Report, view: StudyView) -> str:
    """Why the joint law (eq. 7) has no leave-largest-size-out backtest: too few sizes (named),
    else the reason the law was skipped."""
    sizes = view.sizes
    if len(sizes) < 3:
        return (f"{len(sizes)} model size(s) (N = {', '.join(f'{n:.3g}' for n in sizes)}); "
                "a leave-largest-size-out backtest needs at least 3 — two to fit, the largest "
                "to predict")
    skipped = rep.skipped.get("joint law (eq. 7)")
    return ("the joint law (eq. 7) has no backtest for this pair"
            + (f" ({skipped})" if skipped else " (not fitted for it)"))


def _mixture_size_row(pair: str, mixture: dict[str, Any], sigma: dict[str, SeedNoise],
                      largest: float) -> dict[str, Any]:
    """The pair's row of the chosen mixture law's leave-largest-size-out backtest
    (``fits.json["mixture"]["size_backtest"]``, :func:`fitting.laws.mixture.compare.
    size_backtest`). Where none can be made, the held-out runs above ``largest`` (the largest
    fitted size) are the study's larger-size predictions: their errors, judged where the
    pooled seed noise was measured at their size, else information."""
    bt = mixture["size_backtest"]
    law = f"{mixture.get('chosen')} mixture law"
    if "why" in bt:
        above = [e for per_pair in (mixture.get("heldout") or {}).values()
                 for p, e in per_pair.items() if p == pair and "relative_error" in e
                 and float(e["n"]) > largest * (1 + 1e-6)]
        if not above:
            return _judged_row(LARGER_SIZE, pair, law, None, sigma, bt["why"])
        noised = all(e.get("noise_source") in SEED_NOISE_SOURCES for e in above)
        return _row(LARGER_SIZE, pair, law, _finite_errors(above),
                    _entries_noise(above) if noised else None,
                    detail=f"{len(above)} held-out run(s) at {_sizes_text(above)}, above every "
                    f"fitted size; no backtest: {bt['why']}")
    errors = bt["errors"].get(pair) or []
    missed = bt["not_predicted"].get(pair, 0)
    why = "" if errors else ("its refit without the largest size failed"
                             if pair in bt["failed"] else "no run of the pair at the largest "
                             "size in the law's domain")
    return _judged_row(LARGER_SIZE, pair, law, errors, sigma, why,
                       f"without N = {bt['held_out_n']:.3g} (fitted on N = "
                       + ", ".join(f"{v:.3g}" for v in bt["sizes"]) + "), every mixture there"
                       + (f"; {missed} not predicted" if missed else ""))


def _larger_size_rows(rep: Report, view: StudyView, cooled: JointChinchillaFit | None,
                      sigma: dict[str, SeedNoise], mixture: dict[str, Any] | None
                      ) -> list[dict[str, Any]]:
    """Per pair: the cooled-down L(N, D) backtest where that law is fitted for the pair, else
    the chosen mixture law's in a study of 3 pairs or more, else the joint law's (eq. 7)."""
    rows = []
    for pair in view.points:
        bt = (cooled.backtest or {}).get(pair) if cooled is not None else None
        if cooled is not None and pair in (cooled.pairs or []):
            why = (cooled.meta.get("backtest_failed") or {}).get(pair, "no backtest")
            errs = None if not bt else [e["error"] for e in bt["errors"]]
            rows.append(_judged_row(LARGER_SIZE, pair, COOLED_LAW, errs, sigma,
                                    "" if bt else why,
                                    "" if not bt else f"without N = {bt['held_out_n']:.3g}"))
            rows[-1]["coverage"] = (bt or {}).get("coverage")
            pv = (bt or {}).get("predictive") or {}
            rows[-1]["calibration"] = _calibration(pv.get("points") or [],
                                                   pv.get("calibration"))
            continue
        if (mixture or {}).get("size_backtest"):
            rows.append(_mixture_size_row(pair, mixture, sigma, max(view.sizes)))
            continue
        jbt = (rep.joint.backtest or {}).get(pair) if rep.joint is not None else None
        rows.append(_judged_row(LARGER_SIZE, pair, "joint law (eq. 7)",
                                [jbt["rel_error"]] if jbt else None, sigma,
                                "" if jbt else _no_size_backtest(rep, view),
                                "" if not jbt else f"without N = {jbt['held_out_x']:.3g}, "
                                "worst weight"))
    return rows


def _heldout_rows(rep: Report, view: StudyView, mixture: dict[str, Any] | None
                  ) -> list[dict[str, Any]]:
    """The held-out mixtures' rows (:func:`_mixture_heldout_rows`) where the K-pair section
    predicted them, else one row per pair of the primary law's held-out entries."""
    rows = _mixture_heldout_rows(mixture)
    if rows:
        return rows
    entries = [e for e in rep.heldout if e.get("primary")]
    for pair in sorted({e["pair"] for e in entries}):
        es = [e for e in entries if e["pair"] == pair]
        noised = [e for e in es if e.get("noise") is not None]
        noise = _entries_noise(es) if len(noised) == len(es) else None
        row = _row(HELDOUT_RUN, pair, es[0]["law"], [e["error"] for e in es], noise,
                   detail=", ".join(", ".join(e["runs"]) for e in es))
        # one rule for a held-out run: the held-out section's (and check 4's) — each run within
        # REL_TOLERANCE or NOISE_TOLERANCE × its seed sd (fitting.report.sections.heldout), the noise
        # clause only where σ rests on 3 seeds or more: the 2 % clause judges in any case
        row["verdict"] = HOLDS if all(e["within_tolerance"] for e in es) else FAILS
        row["multiple"] = HELDOUT_NOISE_TOLERANCE   # the rule's own multiple, shown as judged
        row["three_sigma"] = (None if row["sigma"] is None
                              else HELDOUT_NOISE_TOLERANCE * row["sigma"])
        row["coverage"] = _marks_coverage(es)
        row["calibration"] = _calibration([e["predictive"] for e in es if e.get("predictive")])
        rows.append(row)
    if not rows and view.held_ids:
        why = (mixture or {}).get("skipped")
        rows.append(_row(HELDOUT_RUN, "–", "–", None, None, "no held-out run was "
                         "predicted (see the section Held-out runs"
                         + (f"; the mixture laws were skipped: {why})" if why else ")")))
    return rows


def _marks_coverage(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The coverage of the calibrated entries' ``inside80`` / ``inside95`` marks, the others
    counted in ``left_out`` (None: none marked)."""
    marked = [e for e in entries if "inside80" in e]
    if not marked:
        return None
    kept = [e for e in marked if e.get("calibrated", True)]
    out = coverage_of_marks({0.80: [e["inside80"] for e in kept],
                             0.95: [e["inside95"] for e in kept]})
    for level in out.values():
        level["left_out"] = len(marked) - len(kept)
    return out


def _calibration(intervals: list[dict[str, Any]], source: str | None = None
                 ) -> dict[str, Any] | None:
    """What a row's intervals were calibrated on: ``calibrated`` (how many), ``calibration_n``
    (the most errors — for ``source`` "leave one run out" the runs — any calibration counted)
    and ``dof`` (the median quantile dof; None: normal quantiles), with ``source``
    (:data:`fitting.intervals.cooled_law.INNER_BACKTEST` or ``LEAVE_ONE_RUN_OUT``) where
    given — None without an interval."""
    if not intervals:
        return None
    ns = [iv["calibration_n"] for iv in intervals if iv.get("calibration_n")]
    dofs = [iv["dof"] for iv in intervals if iv.get("dof") is not None]
    return {"calibrated": sum(bool(iv.get("calibrated")) for iv in intervals),
            "intervals": len(intervals), "calibration_n": max(ns) if ns else None,
            "dof": float(np.median(dofs)) if dofs else None,
            **({"source": source} if source else {})}


def _entries_noise(entries: list[dict[str, Any]]) -> SeedNoise:
    """One σ_seed for a row over several held-out ``entries`` (each with ``noise``,
    ``measured`` and, where known, ``noise_seeds`` and ``noise_dof``): the median seed sd
    relative to the measured loss, on the fewest seeds and dof of any entry (an entry without
    them: 0 seeds, 0 dof — not judged); its source the entries' distinct sources."""
    seeds = min(int(e.get("noise_seeds") or 0) for e in entries)
    dof = min(int(e.get("noise_dof") or 0) for e in entries)
    return SeedNoise(float(np.median([e["noise"] / e["measured"] for e in entries])), seeds,
                     dof, _noise_sources(entries))


def _finite_errors(entries: list[dict[str, Any]]) -> list[float]:
    """The entries' finite ``relative_error`` values (a non-finite one is no point predicted)."""
    return [float(e["relative_error"]) for e in entries
            if math.isfinite(float(e["relative_error"]))]


def _noise_sources(entries: list[dict[str, Any]]) -> str:
    """The entries' distinct ``noise_source`` texts, joined."""
    return "; ".join(sorted({str(e["noise_source"]) for e in entries}))


def _sizes_text(entries: list[dict[str, Any]]) -> str:
    """"N = a, b" of the entries' sizes."""
    return "N = " + ", ".join(f"{n:.3g}" for n in sorted({float(e["n"]) for e in entries}))


def _mixture_heldout_rows(mixture: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per pair, the errors of the held-out mixtures that no fit saw, predicted by the chosen
    mixture law (``fits.json["mixture"]["heldout"]``, :func:`fitting.laws.mixture.transfer.
    heldout_with_seed_noise`): one row judged against the pair's seed noise — the σ that
    section gives each entry (:data:`SEED_NOISE_SOURCES`: the pooled seed noise at its size,
    else the sd over the held-out run's own seeds; the median where entries differ) — over the
    entries with one, and one row of information over the others (their only noise is the
    curve's, not the seed noise). A non-finite prediction is no point predicted (counted in the
    detail)."""
    held = (mixture or {}).get("heldout") or {}
    law = f"{mixture.get('chosen')} mixture law" if mixture else ""
    by_pair: dict[str, list[dict[str, Any]]] = {}
    for run, per_pair in held.items():
        for pair, e in per_pair.items():
            if "relative_error" in e:
                by_pair.setdefault(pair, []).append({**e, "run": run})
    rows = []
    for pair, es in by_pair.items():
        noised = [e for e in es if e.get("noise_source") in SEED_NOISE_SOURCES]
        for part, noise in ((noised, _entries_noise(noised) if noised else None),
                            ([e for e in es if e not in noised], None)):
            if not part:
                continue
            errors = _finite_errors(part)
            missed = len(part) - len(errors)
            if noise is not None:
                noise = SeedNoise(noise.sigma, noise.seeds, noise.dof,
                                  f"{noise.source} (section Mixture laws for K pairs)")
            rows.append(_row(HELDOUT_RUN, pair, law, errors, noise,
                             detail=f"{len(part)} held-out run(s) at {_sizes_text(part)}"
                             + ("" if noise else ", where no seed noise was measured")
                             + (f"; {missed} not predicted" if missed else "")))
            rows[-1]["coverage"] = _marks_coverage(part)
            rows[-1]["calibration"] = _calibration([e["predictive"] for e in part
                                                    if e.get("predictive")])
    return rows


def _family_last_step(c: Curve, curves: dict[str, Curve]) -> float | None:
    """The last loss step of ``c``'s family: its parent's for a cool-down branch, its own
    otherwise (None: a branch whose parent is not among ``curves``)."""
    if not c.parent:
        return float(c.steps.max())
    parent = curves.get(str(c.parent))
    return None if parent is None else float(parent.steps.max())


def _split_at(c: Curve, cut: float, start: float) -> tuple[Curve, np.ndarray]:
    """The curve's losses in [``start``, ``cut``] (the fitted part) and the mask of its losses
    after ``cut`` (the predicted part)."""
    keep = (c.steps >= start) & (c.steps <= cut)
    part = Curve(c.run, c.lr_steps, c.lr, c.steps[keep], c.loss[keep], n=c.n,
                 window=c.window[keep], parent=c.parent, branch_step=c.branch_step)
    return part, c.steps > cut


def last_third_backtest(curves: dict[str, Curve], *, fraction: float = FIT_FRACTION,
                        from_fraction: float = FROM_FRACTION, lam: float = CURVE_LAMBDA,
                        max_points: int = 60) -> tuple[list[float], str]:
    """(relative errors, why not) of :func:`last_third_fit` (its predicted points only)."""
    errors, _, _, why = last_third_fit(curves, fraction=fraction, from_fraction=from_fraction,
                                       lam=lam, max_points=max_points)
    return errors, why


def last_third_fit(curves: dict[str, Curve], *, fraction: float = FIT_FRACTION,
                   from_fraction: float = FROM_FRACTION, lam: float = CURVE_LAMBDA,
                   max_points: int = 60) -> tuple[list[float], list[float], int, str]:
    """(relative errors, why not): the leave-last-third-of-steps-out backtest of the
    LR-annealing law (Tissue et al. 2024 eq. 1, annealing momentum ``lam``), fitted jointly on
    every curve's losses between ``from_fraction`` and ``fraction`` of its family's last step
    (a cool-down branch belongs to its parent's family, so the branches that cool down before
    the cut are fitted whole, from two losses on: without a cool-down in the fit, the stable
    phase of an rsqrt schedule cannot tell the annealing term from the power law; a run's part
    needs three), predicting every loss after
    the cut from the curve's own learning-rate schedule; errors are (predicted − measured) /
    measured at every later loss the law describes (after the warm-up, within the logged
    schedule). Returns (errors, the same relative residuals at every fitted loss — the
    per-point scatter the law leaves on these curves —, the law's parameter count, why not)."""
    parts, rest = {}, {}
    for run, c in curves.items():
        last = _family_last_step(c, curves)
        if last is None:
            continue
        part, later = _split_at(c, fraction * last, from_fraction * last)
        # a branch before the cut is all cool-down: two points of it inform the annealing term
        # (a probe curve every 50 steps has two in a 100-step branch); a run needs three
        if part.steps.size >= (2 if c.parent else 3):
            parts[run] = part
        if later.any():
            rest[run] = later
    if len(parts) == 0 or sum(p.steps.size for p in parts.values()) < 6:
        return [], [], 0, "fewer than 6 losses before the cut"
    try:
        fit = fit_annealing_law(parts, lam=lam, form=CURVE_FORM,
                                options=CurveFitOptions(max_points=max_points))
    except FitError as e:
        return [], [], 0, str(e)
    errors: list[float] = []
    for run, later in rest.items():
        errors += relative_errors(fit, curves[run], later & curves[run].fit_steps(0.0))
    residuals: list[float] = []
    for part in parts.values():
        residuals += relative_errors(fit, part, np.ones(part.steps.size, bool))
    return (errors, residuals, len(fit.params),
            "" if errors else "no loss after 2/3 of a run's steps")


def relative_errors(fit: Any, c: Curve, mask: np.ndarray) -> list[float]:
    """(law − loss) / loss at ``c``'s losses under ``mask``."""
    if not mask.any():
        return []
    n = c.n if fit.size_terms else None
    pred = fit.predict(c.steps[mask], c.lr_steps, c.lr, n=n, window=c.window[mask])
    return list((pred - c.loss[mask]) / c.loss[mask])


def _experiment_of_runs(table: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """{run_id: (size, whole mixture)}: the runs of one experiment — its seeds and the
    cool-down branches of each — share one curve law (:func:`fitting.data.seeds.run_mixtures`
    names the mixture; runs of other sizes or mixtures do not share L0, A, C)."""
    frame = pd.DataFrame({"run": table["run_id"].astype(str), "mixture": run_mixtures(table),
                          "n": table["n"] if "n" in table.columns else np.nan})
    first = frame.groupby("run", sort=False).first()
    return {str(r): (f"{float(v.n):.6g}", str(v.mixture)) for r, v in first.iterrows()}


def _pair_curves_for_backtest(view: StudyView, pair: str) -> tuple[dict[str, Curve], str]:
    """The pair's curves and what they are: its probe loss where the table has it (the same
    examples at every probe step), else its training loss where the table logs it per pair
    (every log step: dense enough for a cut at 2/3), else its evaluation loss; trained runs
    only (weight 0 is evaluated, not learnt)."""
    table = view.table_fit  # with its cool-down branches
    try:
        curves = pair_training_curves(table, pair)
        probe = curve_loss_metric(table, pair) == PROBE_METRIC
        return curves, f"{'probe' if probe else 'training'} loss of the pair"
    except FitError:
        pass
    curves = curves_from_table(table, loss_metric=view.metric, pair=pair,
                               eval_set=view.eval_set, loss_window=0)
    if "weight" in table.columns:
        w = table[(table["pair"].astype(str) == pair)].groupby(
            table["run_id"].astype(str))["weight"].first()
        curves = {r: c for r, c in curves.items() if not (w.get(r, 1.0) <= 0)}
    return curves, f"{view.eval_set} {view.metric}"


def longer_run_errors(view: StudyView, pair: str, *, lam: float = CURVE_LAMBDA
                      ) -> tuple[list[float], str, str, SeedNoise | None]:
    """(relative errors, why none, the loss fitted, the per-point scatter) of the pair's
    longer-run backtest: :func:`last_third_fit` of each experiment (its seeds and branches
    fitted together, one fit per experiment), the errors pooled; the scatter
    (:func:`point_scatter`) from the same fits' residuals on the steps they were fitted on."""
    experiment = _experiment_of_runs(view.table_fit)
    try:
        curves, loss = _pair_curves_for_backtest(view, pair)
    except FitError as e:
        return [], str(e), "", None
    groups: dict[tuple[str, str], dict[str, Curve]] = {}
    for run, c in curves.items():
        groups.setdefault(experiment.get(c.parent or run, ("", c.parent or run)), {})[run] = c
    errors: list[float] = []
    fits: list[tuple[list[float], int]] = []
    whys = []
    for group in groups.values():
        try:
            e, r, k, w = last_third_fit(group, lam=lam)
        except FitError as err:
            e, r, k, w = [], [], 0, str(err)
        errors += e
        fits += [(r, k)] if r else []
        whys += [w] if w else []
    return (errors, "" if errors else (whys[0] if whys else "no curve"), loss,
            point_scatter(fits, f"per-point scatter of the fitted steps ({loss or 'loss'})"))


def point_scatter(fits: Sequence[tuple[Sequence[float], int]], source: str
                  ) -> SeedNoise | None:
    """The per-point scatter a curve law leaves on the curves it was fitted on, pooled over
    ``fits`` ((relative residuals, parameters fitted) each): s² = Σ r² / Σ (m − k), on
    Σ (m − k) dof (the residual variance of least squares); ``seeds`` the points. This, not the
    seed sd of a cooled end, is the scatter of a per-step loss: the model itself moves between
    steps. None without a residual dof."""
    ss = sum(float(np.sum(np.square(r))) for r, _ in fits)
    dof = sum(max(0, len(r) - k) for r, k in fits)
    if dof == 0:
        return None
    return SeedNoise(math.sqrt(ss / dof), sum(len(r) for r, _ in fits), int(dof), source)


def _longer_run_rows(view: StudyView, sigma: dict[str, SeedNoise]
                     ) -> list[dict[str, Any]]:
    """One row per pair of :func:`longer_run_errors`."""
    law = f"LR-annealing law (Tissue et al. eq. 1, {CURVE_FORM} form, λ = {CURVE_LAMBDA:g})"
    rows = []
    for pair in view.points:
        errors, why, loss, scatter = longer_run_errors(view, pair)
        rows.append(_row(LONGER_RUN, pair, law, errors, scatter, why,
                                f"{loss or 'loss'}, fitted per experiment on "
                                f"{FROM_FRACTION:.0%}–{FIT_FRACTION:.0%} of each run's steps, "
                                "its branches that cool down before the cut included"))
    return rows


def _later_cooldown_rows(view: StudyView, curves: dict[str, Any] | None,
                         sigma: dict[str, SeedNoise]) -> list[dict[str, Any]]:
    """One row per pair of the curve section's tested cooled-down ends (none without
    branches); the section's reason where it computed none."""
    if not view.branches:
        return []
    curves = curves or {}
    pairs = curves.get("pairs") or {}
    skipped = curves.get("skipped") or {}
    law = "LR-annealing law (Tissue et al. eq. 1" + (f", {curves['form']} form" if "form" in
                                                     curves else "") + ")" + (
        f", λ = {curves['lam']:g}" if "lam" in curves else "")
    rows = []
    for pair in view.points:
        got = pairs.get(pair)
        why = "" if got else (skipped.get(pair)
                              or "the curve section was not computed (see Skipped)")
        # judged against the σ the curve section judged with (the per-point scatter where
        # the ends are single probe losses, else the evaluation loss's seed noise)
        noise = (sigma.get(pair) if not got or got.get("sigma") is None else
                 SeedNoise(float(got["sigma"]), int(got.get("sigma_seeds") or 0),
                           int(got.get("sigma_dof") or 0), str(got.get("sigma_source", ""))))
        rows.append(_row(LATER_COOLDOWN, pair, law, got["errors"] if got else None, noise,
                         why, "" if not got else f"{got['n_families']} parents, each fitted "
                         "on its stable phase and one branch"))
    return rows


def extrapolation_rows(rep: Report, view: StudyView, cooled: JointChinchillaFit | None,
                       curves: dict[str, Any] | None = None,
                       mixture: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every row of the section (module docstring), larger size first; ``curves``: the curve
    section's result (``fits.json["curves"]``, :func:`fitting.report.sections.curves.curves_section`);
    ``mixture``: the K-pair section's (``fits.json["mixture"]``,
    :func:`fitting.report.sections.mixture.mixture_section`), whose held-out mixtures it judges."""
    sigma = _sigma(view)
    return (_larger_size_rows(rep, view, cooled, sigma, mixture)
            + _heldout_rows(rep, view, mixture)
            + _longer_run_rows(view, sigma) + _later_cooldown_rows(view, curves, sigma))


def _coverage_text(cov: dict[str, Any] | None, cal: dict[str, Any] | None = None) -> str:
    """"k/n · k/n" of a row's calibrated predictive intervals at 80 and 95 %, with what they
    were calibrated on (errors, quantile dof) and how many uncalibrated ones were left out;
    "not calibrated" where none was; "–" without intervals."""
    if not cov:
        return "–"
    left = int(cov.get("0.80", {}).get("left_out") or 0)
    if not cov.get("0.80", {}).get("n"):
        return f"not calibrated ({left} intervals, not counted)" if left else "–"
    text = " · ".join(f"{cov[q]['inside']}/{cov[q]['n']}" for q in ("0.80", "0.95"))
    if cal and cal.get("calibration_n"):
        what = "runs left out" if cal.get("source") == LEAVE_ONE_RUN_OUT else "errors"
        text += f" (calibrated on {cal['calibration_n']:g} {what}"
        text += "" if cal.get("dof") is None else f", {cal['dof']:.1f} dof"
        text += ")"
    return text + (f"; {left} not calibrated, not counted" if left else "")


def _pct(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.2%}"


def _ci(ci: Sequence[float] | None) -> str:
    """σ's 90 % interval as "a–b" (percent)."""
    return "–" if not ci else f"{ci[0]:.2%}–{ci[1]:.2%}"


def _seeds_text(r: dict[str, Any]) -> str:
    """"k seeds, d dof" of a row's σ ("k points" for a per-point scatter; "–" without one)."""
    if r.get("sigma_dof") is None:
        return "–"
    unit = "points" if str(r.get("sigma_source", "")).startswith("per-point") else "seeds"
    return f"{r.get('sigma_seeds')} {unit}, {r['sigma_dof']} dof"


def _k(r: dict[str, Any]) -> str:
    """The row's multiple of σ as printed ("3", or "4.85" on a σ of 2 dof)."""
    return f"{r.get('multiple') or NOISE_MULTIPLE:.3g}"


def _statement(kind: str, rows: list[dict[str, Any]]) -> str:
    """What the user may do with predictions of this kind."""
    what = _WHAT[kind]
    judged = [r for r in rows if r["verdict"] in (HOLDS, FAILS)]
    failed = [r for r in judged if r["verdict"] == FAILS]
    vs = "; ".join(f"{r['pair']}: {'backtest' if kind != HELDOUT_RUN else 'error'} "
                   f"{_pct(r['rmse'])} vs {_k(r)}σ {_pct(r['three_sigma'])}"
                   for r in (failed or judged))
    if failed:
        return f"{what}: not trustworthy beyond the noise ({vs})."
    if judged and len(judged) == len(rows):
        return f"{what}: trustworthy within the noise ({vs})."
    if judged:
        return (f"{what}: within the noise where judged ({vs}); the other rows are "
                "not judged (see the table).")
    few = [r for r in rows if str(r["verdict"]).startswith(FEW_SEEDS)]
    if few:
        errors = "; ".join(f"{r['pair']}: {_pct(r['rmse'])} vs {_k(r)}σ {_pct(r['three_sigma'])} "
                           f"({_seeds_text(r)}, σ's 90 % CI {_ci(r['sigma_ci90'])})"
                           for r in few)
        return (f"{what}: not judged — the seed noise rests on fewer than {MIN_DOF + 1} seeds, "
                f"too few to judge against, so the errors ({errors}) are information, not a "
                "check; train a third seed to judge them.")
    info = [r for r in rows if r["verdict"] == NO_NOISE]
    if info:
        errors = "; ".join(f"{r['pair']}: {_pct(r['rmse'])}" for r in info)
        return (f"{what}: not judged — no seed noise was measured, so the errors ({errors}) "
                "are information, not a check; repeat a run with another seed to judge them.")
    return f"{what}: not backtested ({rows[0]['verdict'] if rows else 'no row'})."


def extrapolation_section(doc: Document, rep: Report, view: StudyView,
                          cooled: JointChinchillaFit | None,
                          curves: dict[str, Any] | None = None,
                          mixture: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the section into ``doc`` and return ``fits.json["extrapolation"]``: ``rows``
    (:func:`extrapolation_rows`), ``statements`` {kind: sentence} and ``noise_multiple``."""
    rows = extrapolation_rows(rep, view, cooled, curves, mixture)
    kinds = [k for k in (LARGER_SIZE, HELDOUT_RUN, LONGER_RUN, LATER_COOLDOWN)
             if any(r["kind"] == k for r in rows)]
    statements = {k: _statement(k, [r for r in rows if r["kind"] == k]) for k in kinds}
    doc.h(2, "How far the predictions can be trusted")
    doc.table(["extrapolation", "pair", "law", "points", "RMSE", "worst", "σ",
               "σ seeds (dof)", "σ 90 % CI", "k·σ", "verdict",
               "inside 80 · 95 % predictive interval", "detail"],
              [[r["kind"], r["pair"], r["law"], str(r["n_points"]), _pct(r["rmse"]),
                _pct(r["worst"]), _pct(r["sigma"]), _seeds_text(r), _ci(r["sigma_ci90"]),
                _pct(r["three_sigma"]),
                f"**{r['verdict']}**" if r["verdict"] == FAILS else r["verdict"],
                _coverage_text(r.get("coverage"), r.get("calibration")), r["detail"] or "–"]
               for r in rows])
    doc.p("Each row predicts points that no fit saw and says whether the error stays within "
          "the noise of what was predicted. " + " ".join(statements.values()))
    doc.h(3, "How to read the table")
    doc.ul(_reading_rules())
    return {"rows": rows, "statements": statements, "noise_multiple": NOISE_MULTIPLE}


def _reading_rules() -> list[str]:
    """The section's rules, below its table: what σ is per row, the verdict, the intervals."""
    return [
        "σ is the noise of the quantity predicted: the seed-to-seed sd of the same experiment "
        "relative to its loss for cooled-down ends (where no design run is repeated, that of "
        "the verification runs, pooled over their mixtures); for the longer run, and for "
        "later cool-downs judged on single probe losses, the per-point scatter the curve law "
        "leaves on the steps it was fitted on (the model itself moves between steps, by more "
        "than the seed sd of a cooled end). σ's seeds (points), dof and 90 % interval (χ²) "
        "are given.",
        f"Verdict: holds when the RMSE is within k·σ, k = {NOISE_MULTIPLE:g} or, on a σ of "
        f"few dof, Student's t quantile where wider (4.85 on 2 dof, 3.48 on 3: "
        "fitting.core.seed_noise.judging_multiple) — so an exact law passes at the nominal "
        "rate; without a σ the error is information, not a check, and so it is where σ rests "
        f"on fewer than {MIN_DOF} degrees of freedom (from 2 seeds σ's 90 % interval spans "
        "[0.51σ, 15.9σ]).",
        "Larger size: the leave-largest-size-out backtest of the law the report leads with. "
        "Held-out run: runs trained and never fitted; no choice saw them (every fit, and the "
        "form and budget selection of L(N, D), uses the fitted runs only), judged by the "
        f"held-out runs' rule: each within {REL_TOLERANCE:.0%} or "
        f"{HELDOUT_NOISE_TOLERANCE:g}× its seed sd (section Held-out runs; the noise clause "
        f"where that sd rests on {MIN_DOF + 1} seeds or more); with 3 pairs or more, the "
        "held-out mixtures as the chosen mixture law predicts them.",
        "Longer run: the LR-annealing curve law, fitted per experiment (its seeds and "
        "branches) on the pair's probe loss (else its training loss, else its evaluation "
        "loss: the detail column says which) between 40 % and 2/3 of each run's steps, with "
        "the cool-down branches that end before the cut, predicts the rest from the run's "
        "learning-rate schedule. Later cool-down: the same law, fitted on each parent's "
        "stable phase and one of its branches, predicts the cooled-down ends of its other "
        "branches and its own (section Training curves and curve-law continuations).",
        "Inside 80 · 95 % predictive interval: how many of the row's points fell inside their "
        "nominal 80 % and 95 % predictive intervals (fitting.intervals.predictive), counted "
        "over calibrated intervals only — those with a calibration term fixed before the "
        "point was read, on the errors and dof shown; an uncalibrated interval (no backtest "
        "to calibrate it) is listed as not counted. An interval that holds far less often "
        "than it says is too narrow, one that always holds may be too wide to use (the "
        "section Held-out runs gives each band's width).",
    ]


