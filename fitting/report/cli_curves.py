"""``mnmt-fit curves``: schedule-aware curve laws fitted to the runs of a table, predicting the
held-out runs at every logged step (Tissue et al. 2024 eq. 1, ``--law annealing``; Luo et al.
2025's Multi-Power Law, ``--law multipower``).

The table is the tidy metrics table (``learning_rate`` and ``train_loss`` rows, or ``--metric``)
or a wide table with columns run, step, lr, loss (optional n), renamed with ``--columns``
(:mod:`fitting.laws.curves.runs`).
"""

from __future__ import annotations

import argparse
from typing import Any

from fitting.core.base import FitError
from fitting.data.tables import read_table
from fitting.laws.curves.annealing import fit_annealing_law
from fitting.laws.curves.joint_fit import heldout_errors
from fitting.laws.curves.multipower import fit_multipower_law
from fitting.laws.curves.runs import check_runs, curves_from_table

__all__ = ["curves_command", "curves_text", "CURVE_LAWS"]

#: ``--law`` → the fit function
CURVE_LAWS = {"annealing": fit_annealing_law, "multipower": fit_multipower_law}


def curves_command(args: argparse.Namespace) -> dict[str, Any]:
    """Fit ``--law`` on every run of ``TABLE`` but the ``--holdout`` ones; predict those.

    Returns {"law", "fit": the fit's JSON, "heldout": {run: {mean, worst, last, steps,
    predicted, measured}}} (:func:`fitting.laws.curves.joint_fit.heldout_errors`)."""
    src = str(args.table)
    df = read_table(args.table, args.columns)
    curves = curves_from_table(df, source=src, loss_metric=args.metric)
    held = check_runs(curves, args.holdout or [])
    if not held:
        raise FitError("curves: name at least one --holdout RUN to predict", column="run")
    for r in held:
        curves[r].check_schedule()
    late = sorted(r for r, c in curves.items() if r not in held and c.late_start is not None)
    fitted = {r: c for r, c in curves.items() if r not in held and r not in late}
    if not fitted:
        raise FitError(f"curves: every run of {src} is held out or has no rates from step 0; "
                       "nothing left to fit", column="run")
    size_terms = {"auto": None, "on": True, "off": False}[args.size_terms]
    unc = None if args.uncertainty == "none" else args.uncertainty
    fit = CURVE_LAWS[args.law](fitted, size_terms=size_terms, from_step=args.from_step,
                               uncertainty=unc, n_refits=args.n_refits, seed=args.seed)
    if late:
        fit.warnings.append(f"{len(late)} run(s) left out of the fit: their learning rate is "
                            f"logged from late in the run on (e.g. {late[0]!r}; a branch without "
                            "its parent's rates)")
    return {"law": fit.law, "fit": fit.to_json(),
            "heldout": {r: heldout_errors(fit, curves[r]) for r in held}}


def curves_text(res: dict[str, Any]) -> str:
    """The fit's parameters and one line per held-out run: mean, worst and last-step error."""
    fit = res["fit"]
    lines = [f"law: {res['law']}   fitted runs: {len(fit['runs'])}   losses: {fit['n_points']}"]
    for k, v in fit["params"].items():
        sd = (fit.get("stderr") or {}).get(k)
        lines.append(f"  {k:>8s} = {v:.6g}" + (f" ± {sd:.3g}" if sd is not None else ""))
    for w in fit["warnings"]:
        lines.append(f"  WARNING: {w}")
    lines.append(f"{'held-out run':40s} {'mean':>8s} {'worst':>8s} {'last':>8s} {'steps':>6s}")
    for run, e in res["heldout"].items():
        lines.append(f"{run:40s} {e['mean']:8.3%} {e['worst']:8.3%} {e['last']:+8.3%} "
                     f"{len(e['steps']):6d}")
    return "\n".join(lines)
