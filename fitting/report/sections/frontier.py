"""The report's section on the eq. 11 law's predictions (:func:`frontier_section`): the law,
the predicted frontier at larger sizes and the recommended weights — or, where no weighting
beats uniform weights by more than the fit's noise (:func:`weights_verdict`), the statement
that the weights do not matter at that size. The frontier in quality metrics:
:mod:`fitting.report.sections.quality`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fitting import plots
from fitting.core.base import FitError
from fitting.core.options import UncertaintyOptions
from fitting.intervals.eq11 import frontier_intervals
from fitting.laws.size.effective import MultilingualLawFit, fit_multilingual_law
from fitting.laws.size.frontier import Recommendation, frontier_2pair, frontier_kpair, recommend
from fitting.report.markdown import Document, format_number
from fitting.report.record import Report
from fitting.report.view import StudyView

__all__ = ["frontier_section", "weights_verdict", "NOISE_SOURCE", "observed_pairs",
           "flag_unidentified"]


def observed_pairs(fin: pd.DataFrame, pairs: list[str]) -> dict[float, tuple]:
    """Per size: (loss of pair 1, loss of pair 2) of each run trained on both."""
    if "run_id" not in fin.columns:
        return {}
    wide = fin.pivot_table(index=["run_id", "n"], columns="pair", values="value", aggfunc="mean")
    wts = fin.pivot_table(index=["run_id", "n"], columns="pair", values="weight", aggfunc="mean")
    if not set(pairs) <= set(wide.columns):
        return {}
    ok = (wts[pairs[0]] > 0) & (wts[pairs[1]] > 0)
    wide = wide[ok.reindex(wide.index).fillna(False).to_numpy()]
    out = {}
    for n, g in wide.groupby(level="n"):
        out[float(n)] = (g[pairs[0]].to_numpy(float), g[pairs[1]].to_numpy(float))
    return out


def flag_unidentified(fig: Any, unidentified: Mapping[str, str]) -> Any:
    """Write on a figure drawn from f̂ that f̂ is not identified for some pairs."""
    if unidentified:
        fig.suptitle(f"f̂ not identified for {', '.join(unidentified)}: not determined by the data",
                     color="tab:red", fontsize=8)
    return fig


NOISE_SOURCE = ("RMSE of the eq. 11 fit, preference-weighted over the pairs: the scatter of the "
                "measured final losses around the law")


def weights_verdict(law: MultilingualLawFit, rc: Recommendation) -> dict[str, Any]:
    """Whether the choice of weights matters at ``rc.n``, in the units of the recommendation's
    objective (the preference-weighted predicted loss, nats).

    Noise: the eq. 11 fit's RMSE per pair, preference-weighted (:data:`NOISE_SOURCE`) — a
    difference of predicted losses below it is one that no trained run could show. The weights
    matter when the recommended weighting beats uniform weights by more than the noise
    (``gain_over_uniform`` > ``noise``); ``spread_over_weightings`` is how far the objective ranges
    over every weighting (2 pairs: the first pair's weight 0.01 … 0.99, as the frontier; K
    pairs: the interior of a simplex grid), ``within_noise`` the range of each pair's weight
    over the weightings within the noise of the best, and ``above_l_inf`` how far the best
    weighting's predicted loss is above the law's L∞. An unknown noise (no RMSE) leaves the
    weights mattering: nothing says otherwise.
    """
    pairs = list(rc.weights)
    k = len(pairs)
    r = np.array([rc.preferences[p] for p in pairs], float)
    noise = float(np.dot(r, [law.goodness.get(f"rmse[{p}]", np.nan) for p in pairs]))
    if k == 2:  # the frontier's weightings, predicted as the frontier predicts them
        fr = frontier_2pair(law, [rc.n], pairs=pairs, bands=False)
        grid = f"{pairs[0]} weight 0.01 … 0.99"
    else:
        step = 0.05 if k <= 4 else 0.1
        fr = frontier_kpair(law, [rc.n], pairs=pairs, step=step)
        grid = f"a simplex grid of step {step:g}"
    W = np.vstack([fr.weights, [rc.weights[p] for p in pairs], np.full(k, 1.0 / k)])
    vals = np.vstack([fr.values[float(rc.n)], [rc.predicted[p] for p in pairs],
                      [rc.uniform_predicted[p] for p in pairs]])
    with np.errstate(all="ignore"):
        obj = vals @ r
    best = float(np.dot(r, [rc.predicted[p] for p in pairs]))
    uniform = float(np.dot(r, [rc.uniform_predicted[p] for p in pairs]))
    ok = np.isfinite(obj)
    gain = max(uniform - best, 0.0)
    spread = float(obj[ok].max() - min(obj[ok].min(), best)) if ok.any() else float("nan")
    near = W[ok & (obj <= best + noise)] if np.isfinite(noise) else W[:0]
    l_inf = float(np.dot(r, [law.params.get(f"l_inf[{p}]", np.nan) for p in pairs]))
    return {"weights_matter": not (np.isfinite(noise) and gain <= noise),
            "gain_over_uniform": gain, "spread_over_weightings": spread, "noise": noise,
            "noise_source": NOISE_SOURCE, "weightings": grid,
            "within_noise": {p: [round(float(lo), 6), round(float(hi), 6)] for p, lo, hi in
                             zip(pairs, near.min(axis=0), near.max(axis=0), strict=True)}
            if len(near) else None,
            "above_l_inf": best - l_inf}


def _recommendation_text(rc: Recommendation, v: Mapping[str, Any],
                         preferences: Mapping[str, float] | None) -> str:
    """The report's sentence on the weights at one size: the recommendation where the weights
    matter (:func:`weights_verdict`), else why they do not, with the numbers."""
    t = rc.n
    iv = rc.interval or {}
    uniform = ", ".join(f"{p}: {x:.4f}" for p, x in rc.uniform_predicted.items())
    noise = f"the noise {v['noise']:.2g} nats ({NOISE_SOURCE})"
    if v["weights_matter"]:
        gain = (f"; gain over uniform weights {v['gain_over_uniform']:.2g} nats, above {noise}"
                if np.isfinite(v["noise"]) else "; the noise of the fit is unknown")
        return (f"Recommended weights at N = {t:.3g} ({'equal' if preferences is None else preferences}"
                " preferences, minimising the preference-weighted loss): "
                + ", ".join(f"{p}: {w:.3f}" for p, w in rc.weights.items()) + "; predicted loss "
                + ", ".join(f"{p}: {x:.4f}" + (f" [{iv[p][0]:.4f}, {iv[p][1]:.4f}]" if p in iv else "")
                            for p, x in rc.predicted.items())
                + f"; with uniform weights: {uniform}{gain}.")
    objective = ("mean predicted loss over the pairs" if preferences is None else
                 f"preference-weighted predicted loss ({preferences})")
    if v["spread_over_weightings"] <= v["noise"]:
        return (f"At N = {t:.3g} the choice of weights does not matter: over every weighting "
                f"({v['weightings']}) the {objective} varies by only "
                f"{v['spread_over_weightings']:.2g} nats, less than {noise}; at this size the "
                f"predicted losses are within {v['above_l_inf']:.2g} nats of L∞. Predicted loss "
                f"with uniform weights: {uniform}. No weights are recommended.")
    near = list((v["within_noise"] or {}).items())
    near = near[:1] if len(near) == 2 else near  # two pairs: the first pair's weight says it all
    span = ", ".join(f"{p} {lo:.2f} … {hi:.2f}" for p, (lo, hi) in near)
    return (f"At N = {t:.3g} the choice of weights does not matter near uniform weights: the "
            "best weighting (" + ", ".join(f"{p} {w:.3f}" for p, w in rc.weights.items())
            + f") lowers the {objective} by only {v['gain_over_uniform']:.2g} nats against "
            f"uniform weights, less than {noise}. The weightings within the noise of the best "
            f"span {span}; weightings further out lose up to "
            f"{v['spread_over_weightings']:.2g} nats. Predicted loss with uniform weights: "
            f"{uniform}. No weights are recommended.")


def _frontier_interval_text(predictive: dict) -> str:
    """The frontier's predictive intervals at each target size, in one sentence."""
    parts = []
    for n, per in predictive.items():
        for pair, v in per.items():
            sd = np.asarray(v["sd_total"])
            parts.append(f"N = {float(n):.3g} {pair}: s {np.min(sd):.1%}–{np.max(sd):.1%}"
                         + ("" if v["calibrated"] else " (not calibrated: no backtest)"))
    return ("Predictive intervals of the frontier at the target sizes "
            "(fitting.intervals.eq11; fits.json frontier.predictive): the law's "
            "refits, its leave-largest-size-out backtest grown with log N beyond the largest "
            "fitted size, and the seed noise — " + "; ".join(parts) + ".") if parts else ""


def frontier_section(doc: Document, rep: Report, view: StudyView,
                     target_sizes: Sequence[float] | None,
                     preferences: Mapping[str, float] | None, out_dir: str,
                     uncertainty: UncertaintyOptions,
                     seed_sd: Mapping[str, float] | None = None) -> None:
    """Fit eq. 11 (eq. 12 f̂, falling back to eq. 13) on the fitted runs' seed means
    (``view.final``), draw the frontier with its predictive intervals at the target sizes
    (``seed_sd``: each pair's relative seed sd, :mod:`fitting.intervals.eq11`),
    recommend weights."""
    fin = view.final
    doc.h(2, "Unseen weights and sizes: eq. 11 law, frontier, recommendation")
    sub = fin[fin["weight"].notna()] if "weight" in fin.columns else None
    if sub is None or sub.empty:
        rep.skipped["eq. 11 frontier"] = "the table has no mixture weights"
        doc.p("Skipped: the table has no mixture weights.")
        return
    if sub["n"].nunique() < 3:  # eq. 11 scales with N: a study at one or two sizes cannot fit it
        why = f"{sub['n'].nunique()} model size(s); the eq. 11 law needs at least 3"
        rep.skipped["eq. 11 frontier"] = why
        doc.p(f"Skipped: {why}.")
        return
    fits, reasons = {}, []
    for form in ("eq12", "eq13"):  # eq. 12 where its f̂ is identified, else the linear eq. 13
        try:
            fits[form] = fit_multilingual_law(sub, form=form, uncertainty=uncertainty)
        except FitError as e:
            reasons.append(f"{form}: {e}")
            continue
        if fits[form].identified:
            break
    if not fits:
        rep.skipped["eq. 11 frontier"] = "; ".join(reasons)
        doc.p("Skipped: " + "; ".join(reasons))
        return
    law = next((f for f in fits.values() if f.identified), next(iter(fits.values())))
    if law.form == "eq13" and reasons:
        doc.p("f̂ of eq. 12 could not be fitted (" + reasons[0] + "); using the linear eq. 13.")
    elif law.form == "eq13":
        doc.p("f̂ of eq. 12 is not identified by these weights (" + "; ".join(
            f"{p}: {r}" for p, r in fits["eq12"].not_identified().items()) + "); using the "
            "linear eq. 13.")
    rep.effective = law
    rep.warnings += [f"eq. 11 ({law.form}): {w}" for w in law.warnings]
    unidentified = law.not_identified()
    if unidentified:
        doc.p(f"**Warning: f̂ ({law.form.replace('eq', 'eq. ')}) is not identified for "
              f"{', '.join(unidentified)}.** " + " ".join(
                  f"{p}: {r}." for p, r in unidentified.items()) + " The frontier, the "
              "recommended weights and the eq. 11 predictions below come from f̂ held to its "
              "constraints (0 ≤ f̂ ≤ 1, non-decreasing) and are not determined by the data.")
    sd = law.stderr or {}
    names = ["alpha", "beta1", "l_inf", "c1"] + (["c2", "c3"] if law.form == "eq12" else [])
    rows = [[pair] + [format_number(law.params[f"{k}[{pair}]"], sd.get(f"{k}[{pair}]")) for k in names]
            + [format_number(law.goodness.get(f"r2[{pair}]"), digits=4),
               "yes" if pair not in unidentified else "**no**"] for pair in law.pairs or []]
    doc.p(f"L_i(N; p) = β1 (f̂(p) N)^−α + L∞ with f̂ of {law.form.replace('eq', 'eq. ')}, held to "
          "0 ≤ f̂ ≤ 1, non-decreasing, f̂(0) = 0, f̂(1) = 1.")
    doc.table(["pair", *names, "R²", "f̂ identified"], rows)
    n_max = float(fin["n"].max())
    targets = [float(t) for t in (target_sizes or [4 * n_max, 16 * n_max])]
    pairs = list(law.pairs or [])
    recs = []
    for t in targets:
        try:
            rc = recommend(law, t, preferences)
        except FitError as e:
            rep.skipped[f"recommend N={t:.3g}"] = str(e)
            continue
        verdict = weights_verdict(law, rc)
        recs.append({**rc.to_json(), "f_hat_identified": not unidentified, **verdict})
        doc.p(("(f̂ not identified: not determined by the data) " if unidentified else "")
              + _recommendation_text(rc, verdict, preferences))
    rep.recommendation = recs
    if len(pairs) == 2:
        sizes = sorted(set(float(s) for s in fin["n"].unique()))
        show = sizes[:: max(1, len(sizes) // 3)][-3:] + targets
        try:
            fr = frontier_2pair(law, show, pairs=pairs)
            rep.frontier = fr
            fr.predictive = frontier_intervals(law, fr, targets, sizes, seed_sd or {})
            doc.p(_frontier_interval_text(fr.predictive))
            curves = {n: (v[:, 0], v[:, 1]) for n, v in fr.values.items()}
            bands = {n: ((fr.lower[n][:, 0], fr.upper[n][:, 0]), (fr.lower[n][:, 1],
                                                                  fr.upper[n][:, 1]))
                     for n in fr.lower if n in targets}
            obs = {n: v for n, v in observed_pairs(fin, pairs).items() if n in show}
            rep.figures["frontier"] = plots.save(
                flag_unidentified(plots.plot_frontier(curves, pairs, observed=obs, bands=bands),
                                   unidentified),
                os.path.join(out_dir, "figures", "frontier.png"))
            doc.img("figures/frontier.png", "Predicted trade-off frontier (eq. 11 + f̂) at fitted "
                    "sizes (with observed runs) and at the target sizes (95% band); cf. Fernandes "
                    "Fig. 7.")
            curve = {p: (lambda x, p=p: law.f_hat(x, p)) for p in pairs}
            if rep.joint is not None and all(1.0 in (rep.joint.weights or {}).get(p, [])
                                             for p in pairs):
                pts = {p: {w: (float(rep.joint.fraction(w, p)[0]), float("nan"))
                           for w in rep.joint.weights[p] if w > 0} for p in pairs}
                rep.figures["fraction_fit"] = plots.save(
                    flag_unidentified(plots.plot_fraction(pts, curve, title=r"f(p) and the fitted $\hat{f}$ (eq. 12/13)"), unidentified),
                    os.path.join(out_dir, "figures", "fraction_fit.png"))
                doc.img("figures/fraction_fit.png", "f(p) from the joint law (points, eq. 10) "
                        "and the fitted f̂ (dashed; cf. Fernandes Fig. 7 left).")
        except Exception as e:
            rep.skipped["figures (frontier)"] = f"{type(e).__name__}: {e}"
    elif len(pairs) > 2:
        try:
            fr = frontier_kpair(law, [targets[0]], pairs=pairs, step=0.05 if len(pairs) <= 4
                                else 0.1, bands=False)
            rep.frontier = fr
            v, mask = fr.values[targets[0]], fr.pareto[targets[0]]
            rep.figures["frontier"] = plots.save(
                flag_unidentified(plots.plot_frontier_kpair(
                    v, mask, pairs, title=f"N = {targets[0]:.3g}, {int(mask.sum())} of "
                                          f"{len(mask)} weightings efficient"), unidentified),
                os.path.join(out_dir, "figures", "frontier.png"))
            doc.img("figures/frontier.png", f"Predicted {len(pairs)}-pair trade-off at "
                    f"N = {targets[0]:.3g} over a simplex grid of weights (eq. 11); coloured: "
                    "Pareto-efficient weightings. Full set: `mnmt-fit frontier`.")
        except Exception as e:
            rep.skipped["figures (frontier)"] = f"{type(e).__name__}: {e}"
