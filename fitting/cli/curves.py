"""``mnmt-fit curves``: schedule-aware curve laws fitted to the runs of a table, predicting the
held-out runs at every logged step (Tissue et al. 2024 eq. 1, ``--law annealing``; Luo et al.
2025's Multi-Power Law, ``--law multipower``).

The table is the tidy metrics table (``learning_rate`` rows, and ``probe_loss`` rows where it
has them — a pair's loss on the same examples at every probe step, schema revision 1.4 — else
``train_loss`` rows; or ``--metric``; ``--pair`` picks the pair) or a wide table with columns
run, step, lr (or ``learning_rate``), loss (or ``probe_loss``, or a column named as
``--metric``; optional n), other names mapped with ``--columns``
(:mod:`fitting.laws.curves.runs`, :func:`~fitting.laws.curves.runs.curve_loss_metric`). The
result says which loss was fitted (``"loss"``).

Across sizes: runs of ≥ 3 distinct sizes n fit L0(N) = E + A_N·N^−a (three free size
parameters). Two sizes identify it only under a stated assumption (``--fixed-e VALUE``: E given,
0 for a pure power law; ``--size-exponent VALUE``: a given; :mod:`fitting.laws.curves.joint_fit`);
without one, fitted runs of two sizes are an error that names both flags (or ``--size-terms off``
for one L0 shared by both sizes). The result states the assumption (``"size_terms"``).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from fitting.core.base import FitError
from fitting.core.options import UncertaintyOptions, uncertainty_method
from fitting.data.tables import read_table
from fitting.laws.curves.annealing import fit_annealing_law
from fitting.laws.curves.joint_fit import CurveFitOptions, heldout_errors, size_constraints
from fitting.laws.curves.multipower import fit_multipower_law
from fitting.laws.curves.runs import check_runs, curve_loss_metric, curves_from_table

__all__ = ["curves_command", "curves_text", "size_terms_statement", "CURVE_LAWS"]

#: ``--law`` → the fit function
CURVE_LAWS = {"annealing": fit_annealing_law, "multipower": fit_multipower_law}


def curves_command(args: argparse.Namespace) -> dict[str, Any]:
    """Fit ``--law`` on every run of ``TABLE`` but the ``--holdout`` ones; predict those.

    Returns {"law", "loss": {"metric", "pair"} fitted, "fit": the fit's JSON, "heldout": {run:
    {mean, worst, last, steps, predicted, measured}}}
    (:func:`fitting.laws.curves.joint_fit.heldout_errors`)."""
    src = str(args.table)
    df = read_table(args.table, args.columns)
    pair = getattr(args, "pair", None)
    metric = args.metric or curve_loss_metric(df, pair)
    curves = curves_from_table(df, source=src, loss_metric=metric, pair=pair)
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
    fixed_e, exponent = getattr(args, "fixed_e", None), getattr(args, "size_exponent", None)
    fixed = size_constraints(fixed_e, exponent)
    if fixed and size_terms is False:
        raise FitError("curves: --fixed-e / --size-exponent constrain the size terms; drop "
                       "--size-terms off", column="n")
    sizes = sorted({c.n for c in fitted.values() if np.isfinite(c.n)})
    if size_terms is None and not fixed and len(sizes) == 2:
        raise FitError(
            f"curves: the fitted runs have 2 distinct sizes ({sizes[0]:g}, {sizes[1]:g}); the "
            "size terms L0(N) = E + A_N·N^−a have 3 free parameters and need 3 sizes. Add "
            "--fixed-e VALUE (E given; --fixed-e 0: L0 = A_N·N^−a) or --size-exponent VALUE "
            "(a given) to fit across the two sizes under that assumption, or --size-terms off "
            "for one L0 shared by both sizes", column="n")
    fit = CURVE_LAWS[args.law](fitted, options=CurveFitOptions(
        size_terms=size_terms, fixed_e=fixed_e, size_exponent=exponent, from_step=args.from_step,
        uncertainty=UncertaintyOptions(method=uncertainty_method(args.uncertainty),
                                       n_refits=args.n_refits, seed=args.seed)))
    if late:
        fit.warnings.append(f"{len(late)} run(s) left out of the fit: their learning rate is "
                            f"logged from late in the run on (e.g. {late[0]!r}; a branch without "
                            "its parent's rates)")
    return {"law": fit.law, "loss": {"metric": metric, "pair": pair},
            "size_terms": size_terms_statement(fit.meta, fit.size_terms),
            "fit": fit.to_json(), "heldout": {r: heldout_errors(fit, curves[r]) for r in held}}


def size_terms_statement(meta: dict[str, Any], on: bool) -> dict[str, Any]:
    """What the fit assumed across sizes: {"on": False} without size terms, else the form, the
    fixed and free size parameters, the number of sizes and the one-line ``assumption``."""
    if not on:
        return {"on": False, "assumption": "one L0 for every fitted run (no size terms)"}
    return {"on": True, **meta["size_terms"]}


def curves_text(res: dict[str, Any]) -> str:
    """The fit's parameters and one line per held-out run: mean, worst and last-step error."""
    fit = res["fit"]
    lines = [f"law: {res['law']}   fitted runs: {len(fit['runs'])}   losses: {fit['n_points']}"]
    if "loss" in res:
        loss = res["loss"]
        lines.append(f"loss: {loss['metric']}" + (f" of {loss['pair']}" if loss["pair"] else ""))
    if "size_terms" in res:
        lines.append(f"size terms: {res['size_terms']['assumption']}")
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
