"""The report's size laws of one training budget (Fernandes et al. 2023): the power law per pair
and weight (eq. 6), the joint law (eq. 7) with its effective fractions of parameters (eq. 9–10).

:func:`fit_size_laws` fits them on the fitted runs' seed means (:attr:`StudyView.final`) into
the :class:`~fitting.report.record.Report`; :func:`power_section` and :func:`joint_section`
write their sections and figures. The eq. 11 law, its frontier and the recommendation are in
:func:`fitting.report.sections.frontier.frontier_section`.
"""

from __future__ import annotations

import os

import numpy as np

from fitting import plots
from fitting.core.base import FitError
from fitting.core.options import UncertaintyOptions
from fitting.laws.size.joint import fit_joint_law
from fitting.laws.size.power import fit_power_law
from fitting.report.markdown import Document, format_number
from fitting.report.record import Report
from fitting.report.view import StudyView

__all__ = ["fit_size_laws", "power_section", "joint_section"]


def fit_size_laws(rep: Report, view: StudyView, *, uncertainty: UncertaintyOptions) -> None:
    """Fit eq. 6 per pair and weight (``rep.power_fits``; zero-shot weights and studies of
    fewer than 3 sizes skipped with their reason) and eq. 7 (``rep.joint``) on ``view.final``."""
    fin, data = view.final, view.points
    # per pair and weight: power law (eq. 6); one reason per pair when no weight can have it
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
                rep.power_fits[pair][w] = fit_power_law(n, y, uncertainty=uncertainty)
            except FitError as e:
                rep.skipped[f"power {pair} p={w:g}"] = str(e)
    # joint law (eq. 7)
    try:
        sub = fin[fin["weight"].notna()] if "weight" in fin.columns else fin.assign(weight=1.0)
        rep.joint = fit_joint_law(sub, uncertainty=uncertainty)
    except FitError as e:
        rep.skipped["joint law (eq. 7)"] = str(e)


def power_section(doc: Document, rep: Report, view: StudyView, out_dir: str) -> None:
    """The section "Power law per pair and weight" (eq. 6 with its leave-largest-size-out
    backtest) and the figures of the fits and of their coefficients against p."""
    shown = view.shown
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


def joint_section(doc: Document, rep: Report, view: StudyView,
                  ground_truth: dict[str, float] | None, out_dir: str) -> None:
    """The section on the joint law (eq. 7), its effective fractions f(p) (eq. 10,
    ``rep.fraction``) and their figures."""
    data = view.shown
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
    if frac_pts:  # one column per weight (weights rounded by round_weights in prepare_view)
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
