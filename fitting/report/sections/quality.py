"""The report's section on translation quality against loss (:func:`quality_section`): BLEU,
ChrF, BLEURT and COMET fitted against the loss (Ghorbani et al. 2021 eq. 5; Fernandes et al. 2023
Fig. 8 and 19) per pair, and the eq. 11 frontier in each metric.
"""

from __future__ import annotations

import os

from fitting import plots
from fitting.core.base import FitError
from fitting.core.options import UncertaintyOptions
from fitting.data.tables import final_losses
from fitting.laws.quality import fit_quality_law, quality_points
from fitting.laws.size.frontier import frontier_2pair
from fitting.report.markdown import Document, format_number
from fitting.report.record import Report
from fitting.report.sections.frontier import flag_unidentified, observed_pairs
from fitting.report.view import StudyView

__all__ = ["quality_section", "QUALITY_FORMS"]

#: quality metrics the report fits against the loss, with the form of their law: BLEU = c·L^−p
#: (Ghorbani eq. 5); ChrF, BLEURT and COMET near-linear in the loss (Fernandes Fig. 8 and 19)
QUALITY_FORMS: dict[str, str] = {"chrf": "linear", "bleu": "power", "bleurt": "linear",
                                 "comet": "linear"}


def quality_section(doc: Document, rep: Report, view: StudyView, out_dir: str) -> None:
    """Quality laws (Ghorbani eq. 5; Fernandes Fig. 8/19) for every metric of
    :data:`QUALITY_FORMS` in the fitted runs (``view.table_fit_runs``: every (loss, metric)
    point, seeds included, branches left out), and the frontier in each."""
    table, eval_set = view.table_fit_runs, view.eval_set
    if "metric" not in table.columns:
        return
    metrics = [m for m in QUALITY_FORMS if (table["metric"] == m).any()]
    if not metrics:
        rep.skipped["quality laws"] = f"no {'/'.join(QUALITY_FORMS)} rows in the table"
        return
    doc.h(2, "Translation quality against loss (Ghorbani eq. 5, Fernandes Fig. 8 and 19)")
    rep.quality = {}
    for m in metrics:
        form = QUALITY_FORMS[m]
        rows = []
        for pair in sorted(table.loc[table["metric"] == m, "pair"].astype(str).unique()):
            try:
                trained = table
                if "weight" in table.columns:  # zero-shot rows (p = 0) left out, as in the figures
                    zero_shot = (table["pair"] == pair) & (table["weight"] <= 0)
                    trained = table[~zero_shot]
                    if not ((trained["pair"] == pair) & (trained["metric"] == m)).any():
                        rep.skipped[f"quality {m} {pair}"] = (
                            f"every {pair} run is zero-shot (weight 0); quality laws use trained "
                            f"pairs only")
                        continue
                pts = quality_points(trained, m, eval_set=eval_set, pair=pair)
                if form == "power":  # c·L^−p needs a positive score: count what is left out
                    bad = ~(pts[m] > 0)
                    if bad.any():
                        rep.warnings.append(f"quality {m} {pair}: {int(bad.sum())} of {len(pts)} "
                                            f"points with {m} ≤ 0 left out (the power form "
                                            f"needs {m} > 0)")
                        pts = pts[~bad]
                q = fit_quality_law(pts["loss"], pts[m], form=form, metric=m,
                                    uncertainty=UncertaintyOptions(n_refits=30))
            except FitError as e:
                rep.skipped[f"quality {m} {pair}"] = str(e)
                continue
            rep.quality[(m, pair)] = q
            sd = q.stderr or {}
            rows.append([pair, m, form, *[format_number(v, sd.get(k)) for k, v in q.params.items()],
                         format_number(q.goodness.get("r2"), digits=3), str(q.n_points)])
            rep.warnings += [f"quality {m} {pair}: {w}" for w in q.warnings]
        doc.table(["pair", "metric", "form", "c or a", "p or b", "R²", "points"], rows)
        law = rep.effective
        pairs = list(law.pairs or []) if law is not None else []
        if len(pairs) == 2 and all((m, p) in rep.quality for p in pairs):
            try:
                sizes = [float(s) for s in (rep.frontier.values if rep.frontier else {})]
                fr = frontier_2pair(law, sizes, pairs=pairs, metric=m, bands=False,
                                    metric_map={p: rep.quality[(m, p)].predict for p in pairs})
                curves = {n: (v[:, 0], v[:, 1]) for n, v in fr.values.items()}
                measured = final_losses(table, eval_set=eval_set, metric=m, drop_invalid=True)[0]
                obs = {n: v for n, v in observed_pairs(measured, pairs).items() if n in curves}
                rep.figures[f"frontier_{m}"] = plots.save(
                    flag_unidentified(plots.plot_frontier(curves, pairs, observed=obs, metric=m),
                                       law.not_identified()),
                    os.path.join(out_dir, "figures", f"frontier_{m}.png"))
                doc.img(f"figures/frontier_{m}.png", f"Predicted frontier in {m} (eq. 11 + "
                        f"quality law) with the {m} the runs measured (points) at the fitted "
                        f"sizes; cf. Fernandes Fig. 8 right.")
            except Exception as e:
                rep.skipped[f"frontier {m}"] = f"{type(e).__name__}: {e}"
