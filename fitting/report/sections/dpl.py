"""The report's Double Power Law section (Chen et al. 2023): U-curves of the loss against the
sampling ratio, the optimal ratios of eq. 7, and the temperature baselines that were trained.

:func:`dpl_section` writes it where the table has finite ``data_size`` caps that differ between
pairs (Chen's low-resource setting); when it applies and how the shared parameters are
estimated: its docstring.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from fitting import plots
from fitting.core.base import FitError
from fitting.core.engine import converged, convergence_warning
from fitting.core.options import UncertaintyOptions
from fitting.data.tables import with_optional_columns
from fitting.laws.mixture.dpl import CHEN_EQ6_PARAMS, DPLFit, fit_dpl, optimal_sampling_ratios
from fitting.plots.laws import plot_dpl_curves
from fitting.report.markdown import Document, format_number
from fitting.report.record import Report

__all__ = ["dpl_applies", "fit_dpl_one_low_size", "dpl_converged", "fit_study_dpl",
           "dpl_section"]

_KEY = "DPL (Chen eq. 5–7)"


#: Distinct explicit weights per capped pair below which the temperature baselines join the fit.
MIN_EXPLICIT_WEIGHTS = 5

def _capped(fin: pd.DataFrame) -> pd.DataFrame:
    """Trained rows (weight > 0) of pairs with a finite positive data size."""
    d = pd.to_numeric(fin["data_size"], errors="coerce")
    w = pd.to_numeric(fin["weight"], errors="coerce")
    return fin[(np.isfinite(d) & (d > 0) & (w > 0)).to_numpy()]


def dpl_applies(fin: pd.DataFrame) -> tuple[dict[float, pd.DataFrame], str]:
    """The rows to fit per model size, and why sizes (or the whole section) do not qualify."""
    if not {"data_size", "weight", "pair", "n"} <= set(fin.columns):
        return {}, "the table has no data_size/weight columns"
    fin = with_optional_columns(fin)
    cap = _capped(fin)
    sizes = sorted(set(cap["data_size"].astype(float)))
    if cap["pair"].nunique() < 2 or len(sizes) < 2:
        return {}, ("needs a finite data_size (a cap on training examples) that differs between "
                    f"pairs, Chen's low-resource setting; capped pairs: "
                    f"{sorted(cap['pair'].astype(str).unique()) or 'none'}, data sizes: "
                    f"{[f'{s:g}' for s in sizes] or 'none'}")
    out, why = {}, []
    for n, at_n in cap.groupby("n", sort=True):
        explicit = at_n[at_n["mixture"].astype(str) == ""]
        for rows, least in ((explicit, MIN_EXPLICIT_WEIGHTS), (at_n, 3)):
            counts = rows.groupby("pair")["weight"].nunique().reindex(
                sorted(cap["pair"].unique()), fill_value=0)
            if len(rows) and (counts >= least).all():
                out[float(n)] = rows
                break
        else:
            low = counts[counts < 3]
            why.append(f"N={float(n):.3g}: fewer than 3 distinct weights for "
                       + ", ".join(f"{p} ({int(c)})" for p, c in low.items()))
    return out, "; ".join(why)


def fit_dpl_one_low_size(p, data_size, loss, group, *, data_unit: float = 1e6,
                         gamma: float = CHEN_EQ6_PARAMS["gamma"]) -> DPLFit:
    """Eq. 5 when the directions have two data sizes only: G(D_high) = 0 (Chen's step 1), γ
    fixed, b = −D_high^γ, q from the fitted scale c = G(D_low)·q^β of the smaller size.
    ``meta["converged"]``: whether the polish of (α, β) converged
    (:func:`fitting.core.engine.converged`); False adds a warning (the last iterate is kept
    where it improves on the grid)."""
    p, dsz, y = (np.asarray(v, float).ravel() for v in (p, data_size, loss))
    labels = np.asarray(group, dtype=object).astype(str).ravel()
    sizes = np.unique(dsz)
    if sizes.size != 2:
        raise FitError(f"fit_dpl_one_low_size needs exactly two data sizes, got {sizes.size}")
    groups = list(dict.fromkeys(labels))
    ind = np.stack([(labels == g).astype(float) for g in groups], axis=1)
    low = (dsz == sizes[0]).astype(float)
    if y.size < 4 + len(groups):
        raise FitError(f"DPL with two data sizes: {4 + len(groups)} parameters (k, α, β, c and "
                       f"{len(groups)} biases) but {y.size} points")

    def design(t):
        return np.column_stack([p ** -t[0], low * p ** t[1], ind])

    def solve(t):
        coef, *_ = np.linalg.lstsq(design(t), y, rcond=None)
        return coef, y - design(t) @ coef

    grid = [(a, b) for a in np.linspace(0.02, 3.0, 50) for b in np.linspace(0.1, 8.0, 60)]
    sse = [float(np.sum(solve(t)[1] ** 2)) for t in grid]
    t0 = np.array(grid[int(np.argmin(sse))])
    res = least_squares(lambda t: solve(t)[1], t0, bounds=([1e-3, 1e-3], [10.0, 20.0]),
                        xtol=1e-14, ftol=1e-14, gtol=1e-14)
    t = res.x if np.sum(res.fun ** 2) <= min(sse) else t0
    coef, r = solve(t)
    a, c = float(coef[0]), float(coef[1])
    if a <= 0:
        raise FitError("DPL: the loss does not fall with the sampling ratio at the largest data "
                       "size; no capacity-occupation term")
    if c <= 0:
        raise FitError("DPL: the capped pair's loss shows no over-fitting (fitted scale "
                       f"c = {c:.3g} ≤ 0): no U-curve to fit")
    alpha, beta = float(t[0]), float(t[1])
    dl, dh = sizes / data_unit
    b = -(dh ** gamma)
    q = (c / (dl ** gamma + b)) ** (1.0 / beta)
    params = {"k": a ** (-1.0 / alpha), "alpha": alpha, "q": float(q), "beta": beta,
              "gamma": float(gamma), "b": float(b)}
    bias = {g: float(v) for g, v in zip(groups, coef[2:], strict=True)}
    ss = float(np.sum((y - y.mean()) ** 2))
    fit = DPLFit(law="dpl", params=params, n_points=int(y.size), bias=bias,
                 data_unit=float(data_unit),
                 goodness={"rmse": float(np.sqrt(np.mean(r ** 2))),
                           "r2": 1 - float(r @ r) / ss if ss > 0 else math.nan},
                 meta={"equation": "Chen et al. 2023 eq. 5 with G(D_high) = 0 and γ fixed",
                       "gamma_fixed": True, "converged": converged(res), "data_size_by_group": {
                           g: float(dsz[labels == g][0]) / data_unit for g in groups}})
    if (w := convergence_warning(res, "DPL polish of (α, β)")):
        fit.warnings.append(w)
    return fit


def dpl_converged(fit: DPLFit) -> bool:
    """Whether every polish of ``fit`` converged: ``meta["converged"]``
    (:func:`fit_dpl_one_low_size`) and ``meta["refine_converged"]``
    (:func:`fitting.laws.mixture.dpl.fit_dpl`'s joint polish); a fit without a polish counts as
    converged."""
    return all(fit.meta.get(k) is not False for k in ("converged", "refine_converged"))


def fit_study_dpl(rows: pd.DataFrame, *, bootstrap: int = 0, seed: int = 0) -> tuple[DPLFit, str]:
    """The DPL of one model size's rows (pair, weight, data_size, value); returns the fit and a
    sentence on how it was estimated."""
    p = rows["weight"].to_numpy(float)
    dsz = rows["data_size"].to_numpy(float)
    y = rows["value"].to_numpy(float)
    labels = [f"{a}@{b:g}" for a, b in zip(rows["pair"].astype(str), dsz, strict=True)]
    n_low = int(np.sum(np.unique(dsz) < dsz.max()))
    if n_low >= 3:
        return (fit_dpl(p, dsz, y, labels, bootstrap=bootstrap, seed=seed),
                "Chen's three steps (§3.2), then a joint least-squares polish")
    if n_low == 2:
        g = CHEN_EQ6_PARAMS["gamma"]
        return (fit_dpl(p, dsz, y, labels, gamma=g, bootstrap=bootstrap, seed=seed),
                f"Chen's three steps (§3.2) with γ fixed at eq. 6's {g} (two data sizes below "
                "the largest cannot fit G(D) = D^γ + b), then a joint polish")
    return (fit_dpl_one_low_size(p, dsz, y, labels),
            "one data size below the largest: G(D_high) = 0 as in Chen's step 1, k, α, β and "
            "the low size's over-fitting scale fitted jointly, γ fixed at eq. 6's "
            f"{CHEN_EQ6_PARAMS['gamma']} (it sets no prediction at the trained sizes); no sd")


def _settings(at_n: pd.DataFrame, fitted: set[str]) -> dict[tuple, list[str]]:
    """(pair, data size) tuples of the runs at one size -> their run ids (fitted groups only)."""
    out: dict[tuple, list[str]] = {}
    for run, g in at_n.groupby("run_id", sort=True):
        key = tuple(sorted((str(a), float(b)) for a, b in zip(g["pair"], g["data_size"],
                                                                 strict=True)))
        if len(key) >= 2 and all(f"{a}@{b:g}" in fitted for a, b in key):
            out.setdefault(key, []).append(str(run))
    return out


def _optimum(fit: DPLFit, key: tuple, at_n: pd.DataFrame, runs: Sequence[str]) -> dict:
    pairs = [a for a, _ in key]
    sizes = np.array([b for _, b in key])
    labels = [f"{a}@{b:g}" for a, b in key]
    r = np.full(len(pairs), 1.0 / len(pairs))
    opt = optimal_sampling_ratios(sizes, None, fit)
    pred = [float(fit.predict(opt[i], sizes[i], group=labels[i])) for i in range(len(pairs))]
    out = {"pairs": pairs, "data_size": sizes.tolist(), "optimum": dict(zip(pairs, opt.tolist(),
                                                                          strict=True)),
           "predicted": dict(zip(pairs, pred, strict=True)), "predicted_mean": float(r @ pred),
           "baselines": []}
    base = at_n[at_n["run_id"].astype(str).isin(runs) & (at_n["mixture"].astype(str) != "")]
    for (tag, run), g in base.groupby(["mixture", "run_id"], sort=True):
        g = g.drop_duplicates("pair")
        g = g.set_index(g["pair"].astype(str))
        if not set(pairs) <= set(g.index):
            continue
        w = [float(g.loc[a, "weight"]) for a in pairs]
        meas = [float(g.loc[a, "value"]) for a in pairs]
        prd = [float(fit.predict(w[i], sizes[i], group=labels[i])) for i in range(len(pairs))]
        out["baselines"].append({"mixture": str(tag), "run_id": str(run),
                                 "weights": dict(zip(pairs, w, strict=True)),
                                 "measured": dict(zip(pairs, meas, strict=True)),
                                 "predicted": dict(zip(pairs, prd, strict=True)),
                                 "measured_mean": float(r @ meas), "predicted_mean": float(r @ prd)})
    bl = sorted(out["baselines"], key=lambda b: _natural(b["mixture"]))
    out["baselines"] = bl
    out["beats_all_baselines"] = (None if not bl else
                                  bool(all(out["predicted_mean"] < b["measured_mean"] for b in bl)))
    if bl:  # how far below the best baseline; resolved when farther than the fit's RMSE
        out["margin"] = min(b["measured_mean"] for b in bl) - out["predicted_mean"]
        out["resolved"] = bool(abs(out["margin"]) > fit.goodness.get("rmse", 0.0))
    return out


def _natural(tag: str) -> tuple:
    """"T2" before "T10": the letters, then the number."""
    head = tag.rstrip("0123456789.")
    try:
        return (head, float(tag[len(head):]))
    except ValueError:
        return (tag, math.inf)


def dpl_section(doc: Document, rep: Report, fin: pd.DataFrame, out_dir: str, *,
                uncertainty: UncertaintyOptions = UncertaintyOptions()) -> None:
    """Fit the DPL per model size, tabulate eq. 7's optimum and the trained baselines, draw the
    U-curves; every reason it cannot goes to ``rep.skipped``.

    It applies when the table has a finite ``data_size`` (a cap on the pair's training examples) that
    differs between pairs — Chen's low-resource setting — and, at some model size, ≥ 3 distinct
    weights per capped pair. Per model size the DPL (eq. 5) is fitted on the final losses (seed
    means) of the runs with explicit weights (``mixture`` ""), so that the baselines (``mixture``
    "T1", "T5", …) are predicted, not fitted; when the explicit runs alone have fewer than
    ``MIN_EXPLICIT_WEIGHTS`` (5) weights per pair — too few to pin a direction's curve next to its own
    bias — the baselines are fitted too (≥ 3 weights per pair in all), and the report says so. Each direction (``pair@data_size``) has
    its own bias M_∞.

    How the shared parameters are estimated depends on the distinct data sizes below the largest:
    * ≥ 3: Chen's three steps (§3.2) with the joint polish of :func:`fitting.laws.mixture.dpl.fit_dpl`;
    * 2: the same with γ fixed at Chen's eq. 6 value (G(D) = D^γ + b needs three sizes for γ);
    * 1 (e.g. one capped pair next to a larger one): :func:`fit_dpl_one_low_size`: step 1's
      assumption that the over-fitting term vanishes at the largest size, G(D_high) = 0, with the
      capacity term (k, α), the exponent β and the low size's scale c = G(D_low)·q^β fitted jointly
      (linear parameters exact, α and β by grid and polish); γ is Chen's, which sets no prediction
      at the trained sizes. That is all eq. 7 needs at the trained data sizes.

    Every least-squares polish is judged by the project's one convergence rule
    (:func:`fitting.core.engine.converged`): a fit whose polish stopped before converging (at its
    evaluation cap, say) keeps its last iterate, carries a warning (in the report's warnings too) and
    ``converged: false`` in the section's JSON (``dpl.converged`` per model size)."""
    by_n, why = dpl_applies(fin)
    if not by_n:
        rep.skipped[_KEY] = why
        return
    fin = with_optional_columns(fin)
    doc.h(2, "Sampling ratio and data size: Double Power Law (Chen eq. 5–7)")
    doc.p("F_i(p, D_i) = (k·p)^−α + (D_i^γ + b)·(q·p)^β + M_i (eq. 5), fitted per model size on "
          "the final losses against the sampling ratio p, each direction (pair@data size) with "
          "its own bias M_i; optimal ratios p̂ = argmin Σ_i r_i F_i(p_i, D_i) on the simplex "
          "(eq. 7) with equal preferences r_i. Baselines: the trained runs whose weights come "
          "from temperature sampling (or oversampling): their measured loss and the DPL's "
          "prediction for them." + (f" Not qualifying: {why}." if why else ""))
    cap = _capped(fin)
    rep.dpl = {"fits": {}, "estimation": {}, "settings": [], "fitted_on": {}, "converged": {}}
    boot = uncertainty.capped_resamples(30)
    panels: dict[str, dict[str, dict]] = {}
    for n, rows in by_n.items():
        key = f"N={n:.3g}"
        try:
            fit, how = fit_study_dpl(rows, bootstrap=boot, seed=uncertainty.seed)
        except FitError as e:
            rep.skipped[f"{_KEY} {key}"] = str(e)
            continue
        with_base = bool((rows["mixture"].astype(str) != "").any())
        rep.dpl["fits"][key] = fit.to_json()
        rep.dpl["estimation"][key] = how
        rep.dpl["converged"][key] = dpl_converged(fit)
        rep.dpl["fitted_on"][key] = (
            f"every run, baselines included (fewer than {MIN_EXPLICIT_WEIGHTS} explicit weights "
            "per direction)" if with_base else
            "explicit-weight runs (baselines predicted, not fitted)")
        rep.warnings += [f"DPL {key}: {w}" for w in fit.warnings]
        sd = fit.stderr or {}
        doc.p(f"**{key}** — {how}; fitted on {rep.dpl['fitted_on'][key]}, "
              f"{fit.n_points} points, RMSE {fit.goodness.get('rmse', math.nan):.3g}."
              + ("" if rep.dpl["converged"][key] else
                 " **Not converged**: the optimiser stopped before its convergence test was met; "
                 "the parameters are its last iterate (see Warnings)."))
        doc.table(["k", "α", "q", "β", "γ", "b"],
                  [[format_number(fit.params[k], sd.get(k)) for k in
                    ("k", "alpha", "q", "beta", "gamma", "b")]])
        grows = []
        for g, m in fit.bias.items():
            d = fit.meta.get("data_size_by_group", {}).get(g)
            pc = fit.critical_ratio(d * fit.data_unit) if d is not None else math.nan
            grows.append([g, format_number(m), format_number(pc, digits=3) if pc < 1 else
                          "none (monotone)"])
        doc.table(["direction", "bias M_i", "bottom of the U (p minimising F_i)"], grows)
        at_n = cap[cap["n"].astype(float) == n]
        trained = fin[(fin["n"].astype(float) == n).to_numpy()
                      & (pd.to_numeric(fin["weight"], errors="coerce") > 0).to_numpy()]
        uncapped = sorted(set(trained["pair"].astype(str)) - set(at_n["pair"].astype(str)))
        if uncapped:  # the simplex of eq. 7 would leave out the weight these pairs take
            rep.skipped[f"{_KEY} {key} eq. 7"] = (
                f"pairs without a data_size cap ({', '.join(uncapped)}) share the mixtures: "
                "eq. 7 needs every direction's data size")
        for setting, runs in ({} if uncapped else _settings(at_n, set(fit.bias))).items():
            try:
                o = _optimum(fit, setting, at_n, runs)
            except (FitError, ValueError) as e:
                rep.skipped[f"{_KEY} {key} eq. 7"] = str(e)
                continue
            o["n"] = n
            rep.dpl["settings"].append(o)
            _optimum_table(doc, o)
        _panel_series(panels, fit, rows, at_n, key, rep.dpl["settings"], n)
    if not rep.dpl["fits"]:
        doc.p("Skipped: no model size could be fitted (see Skipped).")
        return
    try:
        rep.figures["dpl"] = plots.save(plot_dpl_curves(panels),
                                        os.path.join(out_dir, "figures", "dpl.png"))
        doc.img("figures/dpl.png", "Loss against the direction's sampling ratio: trained runs "
                "(points), the fitted DPL (lines; a U where the direction over-fits), trained "
                "temperature baselines (crosses, measured) and the eq. 7 optimum (stars, "
                "predicted); cf. Chen Fig. 2 and 5.")
    except Exception as e:  # plotting must never break the report
        rep.skipped["figures (DPL)"] = f"{type(e).__name__}: {e}"


def _optimum_table(doc: Document, o: dict) -> None:
    pairs = o["pairs"]
    head = ["sampling", *[f"p {a}" for a in pairs], *[f"loss {a}" for a in pairs],
            "mean loss", "predicted mean"]
    rows = [["DPL optimum (eq. 7)", *[format_number(o["optimum"][a], digits=3) for a in pairs],
             *[f"(pred. {o['predicted'][a]:.4g})" for a in pairs], "–",
             format_number(o["predicted_mean"])]]
    for b in o["baselines"]:
        rows.append([f"{b['mixture']} (trained)",
                     *[format_number(b["weights"][a], digits=3) for a in pairs],
                     *[f"{b['measured'][a]:.4g} (pred. {b['predicted'][a]:.4g})" for a in pairs],
                     format_number(b["measured_mean"]), format_number(b["predicted_mean"])])
    sizes = ", ".join(f"{a} {d:g}" for a, d in zip(pairs, o["data_size"], strict=True))
    doc.p(f"Data sizes {sizes} (N = {o['n']:.3g}): the eq. 7 optimum, and the trained "
          "baselines with their measured losses (the DPL's predictions in brackets).")
    doc.table(head, rows)
    if o["beats_all_baselines"] is None:
        doc.p("No temperature baseline was trained in this setting (no run with a `mixture` tag).")
    else:
        best = min(o["baselines"], key=lambda b: b["measured_mean"])
        verdict = "beats" if o["beats_all_baselines"] else "does **not** beat"
        doc.p(f"The DPL optimum's predicted mean loss {o['predicted_mean']:.4g} {verdict} every "
              f"trained baseline's measured mean loss (best: {best['mixture']}, "
              f"{best['measured_mean']:.4g}; difference {o['margin']:+.2g}"
              + ("" if o["resolved"] else ", within the fit's RMSE: not resolved by this fit")
              + ")." + (" It is a prediction: a run at p̂ would confirm it."
                        if o["beats_all_baselines"] else ""))


def _panel_series(panels, fit: DPLFit, rows: pd.DataFrame, at_n: pd.DataFrame, key: str,
                  settings: list[dict], n: float) -> None:
    """Add this size's series to the U-curve panels (one panel per direction)."""
    for g in fit.bias:
        pair, _, d = g.partition("@")
        d = float(d)
        sel = (rows["pair"].astype(str) == pair) & (rows["data_size"].astype(float) == d)
        pts = rows[sel & (rows["mixture"].astype(str) == "")]
        here = at_n[(at_n["pair"].astype(str) == pair) & (at_n["data_size"].astype(float) == d)]
        pmin = float(here["weight"].min()) if len(here) else 0.05
        grid = np.linspace(max(0.8 * pmin, 1e-3), 1.0, 120)
        base = here[here["mixture"].astype(str) != ""]
        opt = next((s for s in settings if s["n"] == n and pair in s["pairs"]
                    and s["data_size"][s["pairs"].index(pair)] == d), None)
        panels.setdefault(g, {})[key] = {
            "points": (pts["weight"].to_numpy(float), pts["value"].to_numpy(float)),
            "curve": (grid, fit.predict(grid, d, group=g)),
            "baselines": [(float(w), float(v), str(t)) for w, v, t in
                          zip(base["weight"], base["value"], base["mixture"], strict=True)],
            "optimum": None if opt is None else (opt["optimum"][pair], opt["predicted"][pair]),
        }
