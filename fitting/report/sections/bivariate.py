"""The report's encoder/decoder section (Ghorbani et al. 2021): the bivariate law (eq. 2), its
optimal allocation (eq. 3) and optimal law (eq. 4), loss against N_e at fixed N_d and against
N_d at fixed N_e (Fig. 2), and the penalty of a fixed decoder fraction (Fig. 6).

It applies when the table has ``n_enc`` and ``n_dec`` and at least 3 distinct decoder fractions
N_d/N among the final losses: with encoder and decoder grown in proportion, p_e and p_d cannot
be told apart (the section is then skipped, saying so).
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from fitting import plots
from fitting.core.base import FitError
from fitting.core.options import UncertaintyOptions
from fitting.laws.size.bivariate import BivariateLawFit, fit_bivariate_law
from fitting.plots.laws import plot_bivariate_slices
from fitting.report.markdown import Document, format_number
from fitting.report.record import Report

__all__ = ["bivariate_section", "slice_panels"]

_KEY = "bivariate law (Ghorbani eq. 2)"


def _slice(fit: BivariateLawFit, x: np.ndarray, other: np.ndarray, y: np.ndarray,
           encoder: bool, max_curves: int = 4) -> dict:
    """Points and eq. 2 curves along one side, at each fixed size of the other side that has
    ≥ 2 distinct sizes along this one (the ``max_curves`` most populated)."""
    fixed, counts = np.unique(np.round(other, 6), return_counts=True)
    series = [f for f, c in zip(fixed, counts, strict=True)
              if np.unique(x[np.isclose(other, f, rtol=1e-9)]).size >= 2]
    series = sorted(series, key=lambda f: -int(np.isclose(other, f, rtol=1e-9).sum()))[:max_curves]
    grid = np.geomspace(x.min() / 1.3, x.max() * 1.3, 80)
    curves = {}
    for f in series:
        pred = fit.predict(grid, np.full_like(grid, f)) if encoder else \
            fit.predict(np.full_like(grid, f), grid)
        curves[float(f)] = (grid, pred)
    return {"points": (x, y, np.round(other, 6)), "curves": curves}


def slice_panels(fit: BivariateLawFit, g: pd.DataFrame) -> dict:
    """The two Fig. 2 panels of one pair: ``{"encoder": …, "decoder": …}``."""
    ne, nd = g["n_enc"].to_numpy(float), g["n_dec"].to_numpy(float)
    y = g["value"].to_numpy(float)
    return {"encoder": _slice(fit, ne, nd, y, encoder=True),
            "decoder": _slice(fit, nd, ne, y, encoder=False)}


def bivariate_section(doc: Document, rep: Report, fin: pd.DataFrame, out_dir: str, *,
                      n_refits: int = 30) -> None:
    """Ghorbani eq. 2–4, Fig. 2 and Fig. 6, when encoder and decoder sizes vary independently."""
    if not {"n_enc", "n_dec"} <= set(fin.columns):
        rep.skipped[_KEY] = "the table has no n_enc/n_dec columns"
        return
    sub = fin.dropna(subset=["n_enc", "n_dec"])
    ratio = sub["n_dec"].astype(float) / (sub["n_enc"].astype(float) + sub["n_dec"].astype(float))
    if ratio.round(3).nunique() < 3:
        rep.skipped[_KEY] = (
            "encoder and decoder grow proportionally in this study (fewer than 3 distinct "
            "N_d/N ratios): p_e and p_d cannot be separated")
        return
    doc.h(2, "Encoder/decoder allocation (Ghorbani eq. 2–4, Fig. 2, Fig. 6)")
    doc.p("L(N_e, N_d) = α·(N̄_e/N_e)^p_e·(N̄_d/N_d)^p_d + L∞ (eq. 2; N̄ the geometric means of "
          "the trained sizes); optimal decoder fraction N_d*/N = p_d/(p_e + p_d) (eq. 3); "
          "optimal law L_opt(B) = α*·B^−(p_e+p_d) + L∞ for a total budget B = N_e + N_d "
          "(eq. 4).")
    rows, pens, slices, laws = [], {}, {}, []
    rep.bivariate = {}
    for pair, g in sub.groupby("pair"):
        try:
            b = fit_bivariate_law(g["n_enc"].to_numpy(float), g["n_dec"].to_numpy(float),
                                  g["value"].to_numpy(float),
                                  uncertainty=UncertaintyOptions(n_refits=n_refits))
        except FitError as e:
            rep.skipped[f"bivariate {pair}"] = str(e)
            continue
        sd = b.stderr or {}
        r_opt = b.optimal_decoder_fraction()
        s = b["p_e"] + b["p_d"]
        rows.append([str(pair), *[format_number(b[k], sd.get(k)) for k in
                                  ("alpha", "p_e", "p_d", "l_inf")],
                     format_number(r_opt, digits=3)])
        budget = float((g["n_enc"] + g["n_dec"]).astype(float).max())
        ne_opt, nd_opt = b.optimal_allocation(budget)
        laws.append(f"{pair}: L_opt(B) = {b.alpha_star():.4g}·B^−{s:.3g} + {b['l_inf']:.4g}; at "
                    f"the largest trained B = {budget:.3g}: N_e* = {float(ne_opt):.3g}, "
                    f"N_d* = {float(nd_opt):.3g}, predicted loss "
                    f"{float(b.optimal_law(budget)):.4g}")
        rep.bivariate[str(pair)] = {"fit": b.to_json(), "optimal_decoder_fraction": r_opt,
                                    "alpha_star": b.alpha_star(), "exponent": s}
        r = np.linspace(0.05, 0.95, 91)
        pens[str(pair)] = (b.penalty(r), r_opt)
        slices[str(pair)] = slice_panels(b, g)
        rep.warnings += [f"bivariate {pair}: {w}" for w in b.warnings]
    doc.table(["pair", "α", "p_e", "p_d", "L∞", "optimal N_d/N"], rows)
    doc.ul(laws)
    if not pens:
        return
    try:
        rep.figures["bivariate_slices"] = plots.save(
            plot_bivariate_slices(slices),
            os.path.join(out_dir, "figures", "bivariate_slices.png"))
        doc.img("figures/bivariate_slices.png", "Loss against encoder size at fixed decoder "
                "size (left) and against decoder size at fixed encoder size (right), with the "
                "fitted eq. 2 (lines) through the runs of each series; cf. Ghorbani Fig. 2.")
        r = np.linspace(0.05, 0.95, 91)
        rep.figures["allocation_penalty"] = plots.save(
            plots.plot_allocation_penalty(r, {k: v[0] for k, v in pens.items()},
                                          {k: v[1] for k, v in pens.items()}),
            os.path.join(out_dir, "figures", "allocation_penalty.png"))
        doc.img("figures/allocation_penalty.png", "Multiplicative penalty α#/α* of a fixed "
                "decoder fraction (cf. Ghorbani Fig. 6 left).")
    except Exception as e:  # plotting must never break the report
        rep.skipped["figures (bivariate)"] = f"{type(e).__name__}: {e}"
