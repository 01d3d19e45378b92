"""The report's section "Mixture laws for K pairs" (tables of three pairs or more).

:func:`mixture_section` fits the laws of :mod:`fitting.laws.mixture.laws` to the runs that are
not held out, compares them by cross-validation over design mixtures and on the held-out runs
(:func:`fitting.laws.mixture.compare.compare_mixture_laws`), draws the transfer matrix τ of the
eq. 11 law, and recommends weights at a target size under the caller's constraints
(:func:`fitting.laws.mixture.recommend.recommend_mixture`). With fewer than 3 pairs it does nothing
(two-pair reports are unchanged); with too few design mixtures (< K + 2) it states why it was
skipped. Fields of ``fits.json["mixture"]``: docs/guides/fitting.md.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fitting.core.base import FitError, json_safe
from fitting.data.tables import read_table
from fitting.intervals.mixture import (
    cv_form_weights,
    heldout_mixture_intervals,
    heldout_objective_error,
    objective_interval,
)
from fitting.intervals.predictive import LEVELS, coverage, coverage_text
from fitting.laws.mixture.compare import (
    MixtureComparison,
    compare_mixture_laws,
    rank_laws,
    transfer_matrix,
)
from fitting.laws.mixture.domain import EpochCap
from fitting.laws.mixture.recommend import (
    SUPPORT_POINTS,
    MixtureConstraints,
    recommend_mixture,
    support_bounds,
)
from fitting.laws.mixture.runs import MixtureRuns, mixture_runs, read_wide_runs
from fitting.laws.mixture.transfer import direct_transfer, heldout_with_seed_noise
from fitting.report.markdown import Document, format_number
from fitting.report.sections.heldout import REL_TOLERANCE, check_heldout_runs

__all__ = ["mixture_section", "mixture_payload", "who_helps_whom", "target_for",
           "load_mixture_runs", "MixtureRunOptions", "mixture_run_table", "mixture_text"]

CONSTRAINT_KEYS = ("max_weights", "max_loss", "preferences", "budget_examples", "epoch_cap")


def who_helps_whom(tau: np.ndarray, sd: np.ndarray, pairs: list[str], *, min_tau: float = 0.05
                   ) -> list[list[str]]:
    """Rows (target, helped by, hurt by): sources j with τ_ij > max(min_tau, 2 sd) help target i,
    τ_ij < −max(min_tau, 2 sd) hurt it (sd NaN counts as 0)."""
    rows = []
    for i, p in enumerate(pairs):
        help_, hurt = [], []
        for j, q in enumerate(pairs):
            if i == j:
                continue
            thr = max(min_tau, 2 * (sd[i, j] if np.isfinite(sd[i, j]) else 0.0))
            if tau[i, j] > thr:
                help_.append((tau[i, j], f"{q} ({tau[i, j]:.2f})"))
            elif tau[i, j] < -thr:
                hurt.append((-tau[i, j], f"{q} ({tau[i, j]:.2f})"))
        rows.append([p, ", ".join(t for _, t in sorted(help_, reverse=True)) or "–",
                     ", ".join(t for _, t in sorted(hurt, reverse=True)) or "–"])
    return rows


def target_for(cmp: MixtureComparison, target_sizes: list[float] | None) -> tuple[float, str]:
    """The recommendation's size (the first target size, else 4× the largest fitted size, or
    the fitted size when the laws were fitted at one size) and the law that predicts there: the
    chosen one, else the best by CV error of those that can, ranked on one point set
    (:func:`fitting.laws.mixture.compare.rank_laws`); FitError when none can, or none of them
    is ranked."""
    sizes = sorted(set(float(v) for v in cmp.runs.n[~cmp.runs.heldout]))
    if target_sizes:
        n = float(target_sizes[0])
    else:
        n = 4.0 * sizes[-1] if len(sizes) > 1 else sizes[0]
    can = [f for f in cmp.errors if cmp.laws[f].can_predict(n)]
    if cmp.chosen in can:
        return n, cmp.chosen
    if not can:
        raise FitError(f"no fitted mixture law predicts at N = {n:g} (fitted sizes {sizes})")
    order = rank_laws(cmp.errors, cmp.cv_predictions, cmp.cv_targets, can)[0]
    if not order:
        raise FitError(f"the mixture laws that predict at N = {n:g} ({', '.join(can)}) cannot "
                       "be ranked by CV on one point set")
    return n, order[0]


def mixture_payload(cmp: MixtureComparison, recommendation: dict | None,
                    seed_noise: dict | None = None) -> dict:
    """``fits.json["mixture"]`` from a comparison and a recommendation; ``seed_noise``: the
    study's pooled seed noise (:func:`~fitting.laws.mixture.transfer.pooled_seed_noise`), the sd
    of the one-seed contrasts at the sizes it covers."""
    laws = {}
    for form, fit in cmp.laws.items():
        laws[form] = {**cmp.errors[form], "params": fit.params, "sd": fit.stderr,
                      "goodness": fit.goodness, "warnings": fit.warnings,
                      "uncertainty": fit.meta.get("uncertainty")}
    out: dict = {"pairs": cmp.runs.pairs, "laws": laws, "skipped_laws": cmp.skipped,
                 "chosen": cmp.chosen, "chosen_because": cmp.chosen_because,
                 "transfer": None, "heldout": cmp.heldout, "recommendation": recommendation,
                 "outside_domain": cmp.outside, "size_backtest": cmp.size_backtest}
    if "transfer" in cmp.laws:
        tau, sd = transfer_matrix(cmp.laws["transfer"])
        out["transfer"] = {"pairs": cmp.runs.pairs, "matrix": tau.tolist(), "sd": sd.tolist()}
    out["transfer_direct"] = direct_transfer(cmp.runs, seed_noise)
    out["heldout"], out["heldout_summary"] = heldout_with_seed_noise(cmp.heldout, seed_noise,
                                                                       REL_TOLERANCE)
    _mark_intervals(cmp, out["heldout"], out["heldout_summary"])
    return out


def _mark_intervals(cmp: MixtureComparison, heldout: dict, summary: dict) -> None:
    """Each held-out entry's predictive interval (:func:`~fitting.intervals.mixture.
    heldout_mixture_intervals`: ``predictive``, ``inside80``, ``inside95``, ``calibrated``)
    and their coverage in ``summary["coverage"]``."""
    records = []
    for rid, per_pair in heldout_mixture_intervals(cmp, heldout).items():
        for pair, (iv, calibrated) in per_pair.items():
            e = heldout[rid][pair]
            e["predictive"], e["calibrated"] = iv.to_dict(), calibrated
            e["inside80"], e["inside95"] = (iv.contains(e["measured"], 0.80),
                                            iv.contains(e["measured"], 0.95))
            records.append((iv, e["measured"], calibrated))
    summary["coverage"] = coverage(records, calibrated_only=True)


def _epoch_cap(constraints: dict) -> EpochCap | None:
    """The epoch cap that bounds the laws' domain (`outside_domain`), from the constraints."""
    budget, cap = constraints.get("budget_examples"), constraints.get("epoch_cap")
    return None if budget is None or cap is None else EpochCap(budget, cap)


def _recommend(cmp: MixtureComparison, target_sizes, constraints: dict, seed: int) -> dict:
    n, form = target_for(cmp, target_sizes)
    rec = recommend_mixture(cmp.laws[form], n, MixtureConstraints(
        max_weights=constraints.get("max_weights"), max_loss=constraints.get("max_loss"),
        preferences=constraints.get("preferences"), data_size=cmp.runs.data_size,
        budget_examples=constraints.get("budget_examples"),
        epoch_cap=constraints.get("epoch_cap"),
        min_weights=support_bounds(cmp.runs, epoch_cap=_epoch_cap(constraints))), seed=seed)
    law, pi = cmp.laws[form], rec["constraints"]["preferences"]
    calibration = heldout_objective_error(law, cmp.heldout, pi, max_n=n)
    iv = objective_interval(law, cmp.laws, n, rec["weights"], pi, calibration,
                            cv_form_weights({f: e.get("cv_mae") for f, e in cmp.errors.items()},
                                            form))
    rec["objective_interval"] = None if iv is None else {
        **iv.to_dict(), "calibration_runs": calibration["runs"],
        "calibrated": bool(np.isfinite(calibration["rms_log"]))}
    if form != cmp.chosen:
        rec["law_note"] = (f"the chosen law ({cmp.chosen}) cannot predict at N = {n:g}; the best "
                           f"by CV error that can ({form}) is used")
    return rec


def mixture_section(doc: Document, rep, table: pd.DataFrame, out_dir: str, *,
                    eval_set: str = "validation", metric: str = "loss",
                    heldout_runs: list[str] | tuple = (),
                    target_sizes: list[float] | None = None,
                    constraints: dict | None = None, n_boot: int = 100,
                    seed: int = 0, seed_noise: dict | None = None) -> dict | None:
    """Add the section to ``doc`` and return ``fits.json["mixture"]``; None (and nothing
    written) when the table has fewer than 3 pairs with final losses. ``seed_noise``: as in
    :func:`mixture_payload` (the report pools it from the verification runs)."""
    constraints = dict(constraints or {})
    unknown = [k for k in constraints if k not in CONSTRAINT_KEYS]
    if unknown:
        raise FitError(f"mixture_constraints: unknown key(s) {unknown}; expected "
                       f"{list(CONSTRAINT_KEYS)}")
    try:
        runs = mixture_runs(table, eval_set=eval_set, metric=metric, heldout_runs=heldout_runs,
                            source="report")
    except FitError as e:
        if table["pair"].nunique() < 3 if "pair" in table.columns else True:
            return None
        return _skip(doc, rep, str(e))
    if len(runs.pairs) < 3:
        return None
    doc.h(2, "Mixture laws for K pairs")
    try:
        cmp = compare_mixture_laws(runs, n_boot=n_boot, seed=seed,
                                   epoch_cap=_epoch_cap(constraints))
    except FitError as e:
        return _skip(doc, rep, str(e), header=False)
    rep.mixture_laws = dict(cmp.laws)  # the verification section predicts with them
    rec = None
    try:
        rec = _recommend(cmp, target_sizes, constraints, seed)
    except FitError as e:
        rep.skipped["mixture recommendation"] = str(e)
    payload = mixture_payload(cmp, rec, seed_noise)
    _markdown(doc, rep, cmp, payload, out_dir)
    return payload


def _skip(doc: Document, rep, reason: str, header: bool = True) -> dict:
    if header:
        doc.h(2, "Mixture laws for K pairs")
    doc.p(f"Skipped: {reason}")
    rep.skipped["mixture laws"] = reason
    return {"skipped": reason}


def _markdown(doc: Document, rep, cmp: MixtureComparison, payload: dict, out_dir: str) -> None:
    runs: MixtureRuns = cmp.runs
    n_mix = len(set(runs.mixture_keys[~runs.heldout]))
    doc.p(f"{len(runs.pairs)} pairs, {int((~runs.heldout).sum())} fitted runs ({n_mix} design "
          f"mixtures), {int(runs.heldout.sum())} held out. Laws: eq. 11 with a transfer matrix "
          "(Fernandes et al. 2023, eq. 13's linear effective fraction), Data Mixing Laws (Ye et "
          "al. 2024, one fit per size), Shukor et al. 2025's additive and joint laws ("
          + ("with their D term: the runs' token budgets differ" if any(
              f.d_ref is not None for f in cmp.laws.values())
             else "token budget fixed: the D terms are constants")
          + f"). CV = {_cv_kind(cmp)} (all sizes of a "
          "mixture left out together; every fold refitted from the full fit's start grids); "
          "uncertainty = bootstrap over design mixtures.")
    if any(cmp.outside.values()):
        doc.p("Outside every law's domain, neither fitted nor scored: " + "; ".join(
            f"{count} {why} (run, pair) losses" for why, count in cmp.outside.items() if count)
            + " (untrained: weight 0, a zero-shot loss; over epoch cap: the pair's own data "
            "repeated more often than the epoch cap, where it over-fits).")
    rows = [[form, str(e["n_params"]), format_number(e["cv_mae"], digits=3),
             format_number(e["cv_mape"], digits=3), format_number(e["heldout_mae"], digits=3),
             format_number(e["heldout_mape"], digits=3), _failed_refits(e)]
            for form, e in cmp.errors.items()]
    doc.table(["law", "params", "CV MAE", "CV MAPE %", "held-out MAE", "held-out MAPE %",
               "failed refits (CV; bootstrap)"], rows)
    doc.p(f"Chosen: **{cmp.chosen}** — {cmp.chosen_because}")
    for form, why in cmp.skipped.items():
        rep.skipped[f"mixture law {form}"] = why
    if payload["transfer"]:
        tau = np.array(payload["transfer"]["matrix"])
        sd = np.array(payload["transfer"]["sd"])
        doc.p("Who helps whom (τ_ij of the eq. 11 law beyond max(0.05, 2 sd)):")
        doc.table(["target", "helped by (τ)", "hurt by (τ)"], who_helps_whom(tau, sd, runs.pairs))
        try:
            rep.figures["transfer"] = _save_transfer(payload["transfer"],
                                                     os.path.join(out_dir, "figures",
                                                                  "transfer.png"))
            doc.img("figures/transfer.png", "Transfer matrix τ (row: target, column: source); "
                    "± bootstrap sd over design mixtures.")
        except Exception as e:  # plotting must never break the report
            rep.skipped["figures (transfer)"] = f"{type(e).__name__}: {e}"
    _direct_markdown(doc, payload.get("transfer_direct"))
    if payload["heldout"]:
        _heldout_markdown(doc, payload["heldout"], payload["heldout_summary"], cmp.chosen)
    rec = payload["recommendation"]
    if rec:
        doc.p(f"Recommended weights at N = {rec['target_size']:.3g} ({rec['law']} law"
              + (f"; {rec['law_note']}" if rec.get("law_note") else "")
              + f"), preference-weighted mean loss {rec['objective']:.4g}"
              + _objective_interval_text(rec.get("objective_interval"))
              + ("" if rec["feasible"] else " — the constraints could not all be met") + ":")
        band = rec.get("band") or {}
        doc.table(["pair", "weight", "max weight", "predicted loss", "95% band", "max loss"],
                  [[p, f"{w:.3f}", f"{rec['constraints']['max_weights'][p]:.3g}",
                    format_number(rec["predicted"][p]),
                    "–" if p not in band else f"[{band[p][0]:.4g}, {band[p][1]:.4g}]",
                    format_number(rec["constraints"]["max_loss"].get(p))]
                   for p, w in rec["weights"].items()])
        doc.p(_bounds_text(rec))
        doc.table(["baseline", "mean loss", "violates"],
                  [[name, format_number(b["objective"]), "; ".join(b["violations"]) or "no"]
                   for name, b in rec["baselines"].items()]
                  + [[name, "–", f"skipped: {why}"]
                     for name, why in rec["baselines_skipped"].items()])


def _interval_cell(e: dict) -> str:
    iv = e.get("predictive")
    if not iv:
        return "–"
    marks = " · ".join("yes" if e[k] else "no" for k in ("inside80", "inside95"))
    return (f"[{iv['lo95']:.4g}, {iv['hi95']:.4g}] ({marks})"
            + ("" if e.get("calibrated") else " uncalibrated"))


def _objective_interval_text(iv: dict | None) -> str:
    if not iv:
        return ""
    if not iv["calibrated"]:
        return (f" (95 % predictive interval [{iv['lo95']:.4g}, {iv['hi95']:.4g}] from refits "
                "and forms; no held-out mixtures to calibrate it: too narrow by what the law "
                "misses)")
    dof = iv.get("dof")
    quantile = f"t, {dof:.3g} dof" if dof is not None and math.isfinite(dof) else "normal"
    return (f" (95 % predictive interval [{iv['lo95']:.4g}, {iv['hi95']:.4g}]: the RMS log "
            f"error {iv['sd_extrapolation']:.2%} of {iv['calibration_runs']} held-out mixtures, "
            f"{quantile} quantiles; the refits' {iv['sd_resample']:.2%} and the forms' "
            f"{iv['sd_forms']:.2%} are inside that error, not added)")


def _heldout_markdown(doc: Document, heldout: dict, summary: dict, chosen: str | None) -> None:
    """The held-out table with relative errors, and the count within the tolerance beside the
    count an exact law would reach under the seed noise
    (:func:`~fitting.laws.mixture.transfer.heldout_with_seed_noise`)."""
    rows = [[rid, p, format_number(v["measured"]), format_number(v["predicted"]),
             format_number(v["error"], digits=2),
             "–" if "relative_error" not in v else f"{100 * v['relative_error']:+.1f} %",
             format_number(v["noise"], digits=2), v["noise_source"], _interval_cell(v)]
            for rid, d in heldout.items() for p, v in d.items()]
    doc.p(f"Held-out runs (never fitted), predicted by {chosen}:")
    doc.table(["run", "pair", "measured", "predicted", "error", "relative", "noise",
               "noise from", "95 % predictive interval (inside 80 · 95 %)"], rows)
    cov = summary.get("coverage") or {}
    if cov.get("0.80", {}).get("n"):
        doc.p("Predictive intervals (fitting.intervals.mixture): the chosen law's "
              "leave-one-mixture-out CV error of the pair (and, above the fitted sizes, the "
              "size backtest's error grown with log N) and the entry's seed noise, with t "
              "quantiles on their dof — the bootstrap refits and the other forms are inside "
              "the CV error, reported but not added (where no CV error exists they are the "
              "interval, uncalibrated and not counted); measured inside, calibrated intervals "
              "only: " + "; ".join(f"{q:.0%} {coverage_text(cov, q)}" for q in LEVELS) + ".")
    tol = f"{100 * summary['tolerance']:g} %"
    text = (f"{summary['within']} of {summary['entries']} held-out entries within {tol} of the "
            "measured loss.")
    if summary["with_seed_noise"]:
        text += (f" Of the {summary['with_seed_noise']} at the sizes where the seed noise was "
                 f"measured, {summary['within_with_seed_noise']} are within {tol}, and an exact "
                 f"law would expect {summary['expected_exact']:.1f}: each held-out run is one "
                 f"seed, whose loss scatters about the seed mean by the pooled seed sd; "
                 f"{summary['within_3_seed_sd']} are within 3 seed sd.")
    doc.p(text)


def _cv_kind(cmp: MixtureComparison) -> str:
    """How the comparison cross-validated (the same for every law)."""
    kinds = {e.get("cv") for e in cmp.errors.values()} - {None}
    return next(iter(kinds)) if len(kinds) == 1 else "over design mixtures"


def _failed_refits(e: dict) -> str:
    """"CV failed/folds×targets; bootstrap failed/resamples×targets" of ``errors[form]``;
    failed refits are left out (their points unpredicted, their resamples dropped)."""
    cv = f"{e.get('cv_failed', 0)} of {e.get('cv_folds', '?')} folds"
    if not e.get("boot_resamples"):
        return cv + "; no bootstrap"
    return cv + f"; {e.get('boot_failed', 0)} of {e['boot_resamples']} resamples × targets"


def _direct_markdown(doc: Document, direct: dict | None) -> None:
    """Transfer measured without a law (:mod:`fitting.laws.mixture.transfer`): zero-shot losses
    per target and size, sources lowest first; the contrasts' rankings with their sd."""
    if not direct or not (direct["zero_shot"] or direct["contrasts"]):
        return
    doc.p("Transfer measured directly (no law): a pair's zero-shot loss after training on one "
          "other pair alone (lower = a closer source), and the design's contrasts (the pair at "
          "one weight, the rest on one source). sd: seed sd of the mean where a run has several "
          "seeds; for a one-seed contrast, the pooled seed sd where the study measured it (the "
          "pair's relative seed sd over the mixtures trained with several seeds at that size, "
          "times the loss); else the sd of its last 3 evaluations (a stand-in, not the seed "
          "noise).")
    if direct.get("seed_noise"):
        doc.p("Pooled seed noise (relative sd of a pair's final loss across seeds): " + "; ".join(
            f"{e['pair']} at N = {e['n']:.3g}: {100 * e['relative_sd']:.2g} % ({e['mixtures']} "
            f"mixtures, {e['dof']} dof)" for e in direct["seed_noise"]) + ".")
    zs = direct["zero_shot"]
    rows = []
    for target in dict.fromkeys(e["target"] for e in zs):
        for n in sorted({e["n"] for e in zs if e["target"] == target}):
            mine = sorted((e for e in zs if e["target"] == target and e["n"] == n),
                          key=lambda e: e["loss"])
            rows.append([target, f"{n:.3g}", ", ".join(f"{e['source']} {e['loss']:.3g}"
                                                      for e in mine)])
    if rows:
        doc.table(["target", "N", "zero-shot loss after each source alone (lowest first)"], rows)
    ranked = direct["contrast_rankings"]
    if ranked:
        doc.table(["target", "helped more by", "than by", "N", "own weight",
                   "loss difference ± sd", "beyond 2 sd", "sd from"],
                  [[r["target"], r["better"], r["worse"], f"{r['n']:.3g}",
                    format_number(r["weight"]), f"{r['difference']:.3g} ± {r['sd']:.2g}",
                    "yes" if r["beyond_2sd"] else "no", r["noise"]] for r in ranked])


def _bounds_text(rec: dict) -> str:
    """What the recommendation was chosen by, its size, and the bounds that bind."""
    b = rec.get("bounds") or {}
    text = (f"Target: {rec.get('target_note') or rec['target_size']}. Chosen by "
            f"{(rec.get('criterion') or {}).get('kind', 'the point estimate')}; minimum weights "
            f"where the design has data ({SUPPORT_POINTS} fitted in-domain weights of the pair at "
            "or below it): " + ", ".join(f"{p} {v:.3g}" for p, v in b.get("min_weights", {}).items())
            + ".")
    if b.get("at_min"):
        text += (" **A lower bound binds** for " + ", ".join(b["at_min"]) + ": the law would go "
                 "below the weights it was fitted at, where it is not trusted.")
    if b.get("at_max"):
        text += " At the maximum weight: " + ", ".join(b["at_max"]) + "."
    return text + (f" ({b['note']})" if b.get("note") else "")


def load_mixture_runs(table: pd.DataFrame | str, *, heldout_runs: Sequence[str] = (),
                      eval_set: str = "validation", metric: str = "loss") -> MixtureRuns:
    """Runs from our tidy table (CSV/Parquet, or a DataFrame with a ``pair`` column) or from a
    wide CSV (one row per run: ``run_id``, ``n``/``size``, ``w_<pair>``, ``loss_<pair>``,
    optional ``heldout`` and ``data_size_<pair>``); ``heldout_runs`` are added to the wide
    table's ``heldout`` column."""
    name = table if isinstance(table, str) else "table"
    if isinstance(table, str):
        if not os.path.exists(table):
            raise FitError(f"{table}: no such file", source=table)
        cols = (list(pd.read_csv(table, nrows=0).columns) if table.endswith(".csv")
                else list(read_table(table).columns))
    else:
        cols = list(table.columns)
    if "pair" in cols:
        df = read_table(table) if isinstance(table, str) else table
        ids = check_heldout_runs(df, heldout_runs)
        return mixture_runs(df, eval_set=eval_set, metric=metric, heldout_runs=ids, source=name)
    if "run_id" in cols and any(c.startswith("w_") for c in cols):
        runs = read_wide_runs(table)
        ids = check_heldout_runs(pd.DataFrame({"run_id": runs.run_ids}), heldout_runs)
        runs.heldout = runs.heldout | np.isin(runs.run_ids, ids)
        return runs
    raise FitError(f"{name}: neither a tidy table (columns run_id, pair, n, weight, value, …) "
                   "nor a wide table of runs (columns run_id, n or size, w_<pair>, loss_<pair>); "
                   f"columns found: {cols}", source=name)


@dataclass(frozen=True)
class MixtureRunOptions:
    """What ``mnmt-fit mixture`` asks of :func:`mixture_run_table`: the held-out runs, the
    recommendation's ``target_size`` and ``constraints`` (keys of
    :class:`~fitting.laws.mixture.recommend.MixtureConstraints`), the eval set and metric, the
    bootstrap (``n_boot``, ``seed``), the output folder, and ``max_folds``, ``workers`` and
    ``progress`` of :func:`~fitting.laws.mixture.compare.compare_mixture_laws`."""

    heldout_runs: Sequence[str] = ()
    target_size: float | None = None
    constraints: dict | None = None
    eval_set: str = "validation"
    metric: str = "loss"
    n_boot: int = 100
    seed: int = 0
    out_dir: str | None = None
    max_folds: int = 10
    workers: int | None = None
    progress: Callable[[str], None] | None = None


def mixture_run_table(table: pd.DataFrame | str, options: MixtureRunOptions | None = None
                      ) -> dict:
    """The mixture analysis of ``mnmt-fit mixture``: ``fits.json["mixture"]``'s content for a
    table (:func:`load_mixture_runs`); with ``options.out_dir``, also ``mixture.json`` and
    ``transfer.png`` there."""
    o = options or MixtureRunOptions()
    heldout_runs, target_size, seed, out_dir = o.heldout_runs, o.target_size, o.seed, o.out_dir
    eval_set, metric = o.eval_set, o.metric
    runs = load_mixture_runs(table, heldout_runs=heldout_runs, eval_set=eval_set, metric=metric)
    if len(runs.pairs) < 3:
        raise FitError(f"{runs.source}: {len(runs.pairs)} pair(s) {runs.pairs}; the mixture laws "
                       "need at least 3", column="pair")
    constraints = {k: v for k, v in (o.constraints or {}).items() if v is not None}
    cmp = compare_mixture_laws(runs, n_boot=o.n_boot, seed=seed, max_folds=o.max_folds,
                               workers=o.workers, progress=o.progress,
                               epoch_cap=_epoch_cap(constraints))
    rec, why = None, None
    try:
        rec = _recommend(cmp, None if target_size is None else [target_size], constraints, seed)
    except FitError as e:
        why = str(e)
    payload = mixture_payload(cmp, rec)
    if why:
        payload["recommendation_skipped"] = why
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "mixture.json"), "w", encoding="utf-8") as f:
            json.dump(json_safe(payload), f, indent=1)
        if payload["transfer"]:
            payload["figure"] = _save_transfer(payload["transfer"],
                                               os.path.join(out_dir, "transfer.png"))
    return payload


def _save_transfer(transfer: dict, path: str) -> str:
    """The heat map of ``fits.json["mixture"]["transfer"]`` written to ``path``."""
    from fitting.plots.mixture import plot_transfer_matrix
    from fitting.plots.style import save

    return save(plot_transfer_matrix(np.array(transfer["matrix"]), transfer["pairs"],
                                     np.array(transfer["sd"])), path)


def mixture_text(payload: dict) -> str:
    """A plain-text summary of :func:`mixture_run_table`'s result."""
    kinds = {e.get("cv") for e in payload["laws"].values()} - {None}
    lines = [f"law comparison (CV = {', '.join(sorted(kinds)) or 'none'}):",
             f"  {'law':<11s}{'params':>7s}{'CV MAE':>10s}{'CV MAPE%':>10s}{'HO MAE':>10s}"
             f"{'HO MAPE%':>10s}  failed refits"]
    for form, e in payload["laws"].items():
        lines.append(f"  {form:<11s}{e['n_params']:>7d}" + "".join(
            f"{format_number(e[k], digits=3):>10s}"
            for k in ("cv_mae", "cv_mape", "heldout_mae", "heldout_mape"))
            + f"  {_failed_refits(e)}")
    lines.append(f"chosen: {payload['chosen']} — {payload['chosen_because']}")
    if payload["transfer"]:
        t = payload["transfer"]
        lines.append("transfer matrix τ (row: target, column: source; ± sd):")
        for i, p in enumerate(t["pairs"]):
            lines.append(f"  {p:<10s} " + " ".join(
                f"{t['matrix'][i][j]:6.2f}±{t['sd'][i][j]:.2f}" for j in range(len(t["pairs"]))))
    for target, c in (payload.get("transfer_direct") or {}).get("closest_by_zero_shot",
                                                                 {}).items():
        lines.append(f"  zero-shot: {target} closest to {c['source']} at every size"
                     + (" (beyond 2 sd of every other source)" if c["beyond_2sd_of_every_other"]
                        else ""))
    for c in (payload.get("transfer_direct") or {}).get("contrast_rankings", []):
        lines.append(f"  contrast: {c['target']} helped more by {c['better']} than {c['worse']} "
                     f"at N = {c['n']:.3g}: {c['difference']:.3g} ± {c['sd']:.2g}"
                     + (" (beyond 2 sd)" if c["beyond_2sd"] else "") + f" [sd: {c['noise']}]")
    if payload["heldout"]:
        lines.append("held-out runs (never fitted): run pair measured predicted error noise")
        for rid, d in payload["heldout"].items():
            for p, v in d.items():
                lines.append(f"  {rid} {p} {v['measured']:.4g} {v['predicted']:.4g} "
                             f"{v['error']:+.3g} {format_number(v['noise'], digits=2)} "
                             f"({v['noise_source']})")
    rec = payload["recommendation"]
    if rec:
        lines.append(f"recommendation at N = {rec['target_size']:.3g} ({rec['law']} law), mean "
                     f"loss {rec['objective']:.4g}" + ("" if rec["feasible"] else
                                                      " (constraints not all met)") + ":")
        for p, w in rec["weights"].items():
            lines.append(f"  {p:<10s} w = {w:.3f}  L = {rec['predicted'][p]:.4g}")
        lines.append("  " + _bounds_text(rec))
        for name, b in rec["baselines"].items():
            lines.append(f"  baseline {name}: mean loss {b['objective']:.4g}"
                         + (f", violates: {'; '.join(b['violations'])}" if b["violates"] else ""))
        for name, why in rec["baselines_skipped"].items():
            lines.append(f"  baseline {name}: skipped ({why})")
    elif payload.get("recommendation_skipped"):
        lines.append(f"recommendation skipped: {payload['recommendation_skipped']}")
    return "\n".join(lines)
