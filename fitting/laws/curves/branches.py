"""Cool-down branches predicted from their parent's curve: fit a schedule-aware law on the parent
(optionally cut at the start of its own cool-down, optionally with some branches), predict
every other branch's cooled-down end, and compare it with the trained branch.

A branch (``Curve.parent``, ``Curve.branch_step``; Hägele et al. 2024) is the parent trained up to
step b and then cooled down; its rates are the parent's up to b and its own after
(:func:`fitting.laws.curves.runs.curves_from_table`), so a law fitted on the parent's curve gives
its loss at every step (Tissue et al. 2024 eq. 1; Luo et al. 2025 eq. 1). Each family (a parent
and its branches) is fitted on its own; the loss fitted (``curves``) and the loss judged
(``targets``, e.g. the validation loss of the pair the run trains) may differ: with ``offset``
the prediction of a target adds the median gap target − law at the fitted runs' target steps.

Why the fit needs a cool-down (the parent's own, or a branch): under an rsqrt schedule
η_s ∝ s^−1/2 and S1(s) ∝ s^1/2, so along the stable phase η ∝ 1/S1 and the annealing area is a
function of S1 too — the annealing term and A·S1^−α are confounded, and a fit on the stable
phase alone cannot tell how much a cool-down gains.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fitting.core.base import FitError
from fitting.laws.curves.annealing import fit_annealing_law
from fitting.laws.curves.joint_fit import CurveFitOptions, ScheduleLawFit
from fitting.laws.curves.multipower import fit_multipower_law
from fitting.laws.curves.runs import Curve

__all__ = ["BranchEnd", "BranchPredictions", "branch_families", "predict_branch_ends",
           "BRANCH_LAWS"]

#: the laws :func:`predict_branch_ends` fits, by name
BRANCH_LAWS = {"lr_annealing": fit_annealing_law, "multi_power": fit_multipower_law}


@dataclass(frozen=True)
class BranchEnd:
    """One run's cooled-down end, predicted and trained.

    ``run``, ``parent`` ("" for the parent's own end), ``branch_step`` (NaN for the parent);
    ``step`` the last step of the run's target loss; ``measured`` that loss; ``predicted`` the
    law's value there (over the loss's window, plus the offset); ``error`` = (predicted −
    measured) / measured; ``fitted``: the run's curve was in the fit (then not a test)."""

    run: str
    parent: str
    branch_step: float
    step: float
    measured: float
    predicted: float
    error: float
    fitted: bool


@dataclass
class BranchPredictions:
    """:func:`predict_branch_ends`' result.

    ``law`` the law's name; ``fits`` {parent: the fit of its family}; ``offsets`` {parent: the
    offset added to its predictions (0 without ``offset``)}; ``ends`` one :class:`BranchEnd` per
    run of every family; ``settings`` the options used (``stable_until``, ``fit_branches``,
    ``from_step``, ``offset``); ``failed`` {parent: why its family's fit failed}."""

    law: str
    fits: dict[str, ScheduleLawFit] = field(default_factory=dict)
    offsets: dict[str, float] = field(default_factory=dict)
    ends: list[BranchEnd] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def tested(self) -> list[BranchEnd]:
        """The ends not in the fit: the predictions that test the law."""
        return [e for e in self.ends if not e.fitted]

    def summary(self) -> dict[str, float]:
        """``n`` tested ends, ``median_abs`` and ``worst_abs`` |relative error|, ``mean`` signed
        relative error (NaN without tested ends)."""
        e = np.array([x.error for x in self.tested()])
        if not e.size:
            return {"n": 0, "median_abs": float("nan"), "worst_abs": float("nan"),
                    "mean": float("nan")}
        return {"n": int(e.size), "median_abs": float(np.median(np.abs(e))),
                "worst_abs": float(np.max(np.abs(e))), "mean": float(np.mean(e))}


def branch_families(curves: dict[str, Curve]) -> dict[str, list[str]]:
    """{parent: [its branches by branch step]} for every run of ``curves`` with a branch in it."""
    fam: dict[str, list[str]] = {}
    for run, c in curves.items():
        if c.parent and c.parent in curves:
            fam.setdefault(c.parent, []).append(run)
    return {p: sorted(b, key=lambda r: curves[r].branch_step) for p, b in sorted(fam.items())}


def _cut(c: Curve, until: float | None) -> Curve:
    if until is None or not c.steps.size or c.steps.max() <= until:
        return c
    m = c.steps <= until
    return Curve(c.run, c.lr_steps, c.lr, c.steps[m], c.loss[m], c.n, window=c.window[m],
                 parent=c.parent, branch_step=c.branch_step)


def _chosen(branches: list[str], fit_branches: Sequence[str] | str) -> list[str]:
    """The branches of one family fitted: ``"middle"`` (the middle one by branch step), or the
    names listed that belong to it."""
    if isinstance(fit_branches, str):
        if fit_branches != "middle":
            raise FitError(f"fit_branches must be 'middle' or a list of runs, got "
                           f"{fit_branches!r}", column="run")
        return [branches[len(branches) // 2]] if branches else []
    return [b for b in branches if b in set(fit_branches)]


def _offset(fit: ScheduleLawFit, fitted: list[Curve], targets: dict[str, Curve]) -> float:
    """Median of target − law at the fitted runs' target steps within their fitted range."""
    gaps = []
    for c in fitted:
        t = targets.get(c.run)
        if t is None or not t.steps.size:
            continue
        m = t.fit_steps(fit.from_step) & (t.steps <= c.steps.max())
        if m.any():
            pred = fit.predict(t.steps[m], t.lr_steps, t.lr, n=t.n if fit.size_terms else None,
                               window=t.window[m])
            gaps.append(t.loss[m] - pred)
    if not gaps:
        raise FitError("offset: no target loss within the fitted runs' range", column="loss")
    return float(np.median(np.concatenate(gaps)))


def predict_branch_ends(
    curves: dict[str, Curve],
    *,
    law: str = "lr_annealing",
    stable_until: float | None = None,
    fit_branches: Sequence[str] | str = (),
    targets: dict[str, Curve] | None = None,
    offset: bool = False,
    options: CurveFitOptions = CurveFitOptions(),
    law_params: Mapping[str, Any] | None = None,
) -> BranchPredictions:
    """Fit ``law`` on each parent's curve (its losses up to ``stable_until``; None = all of it,
    its own cool-down included) and the branches ``fit_branches`` names (``"middle"``: the
    middle one of each family), and predict every run's cooled-down end (module docstring).

    ``targets`` ({run: Curve}, default ``curves``): the losses judged, at each run's last
    target step; ``offset``: add their median gap to the law on the fitted runs. ``options`` go
    to the law's fit without size terms; ``law_params`` are the law's own parameters (``lam``
    and ``form`` of ``lr_annealing``, ``max_knots`` of ``multi_power``). A family whose fit
    fails is listed in ``failed``, the others go on."""
    fit_options = dataclasses.replace(options, size_terms=False)
    if law not in BRANCH_LAWS:
        raise FitError(f"law must be one of {sorted(BRANCH_LAWS)}, got {law!r}", column="law")
    fams = branch_families(curves)
    if not fams:
        raise FitError("no cool-down branch whose parent is among the curves (Curve.parent)",
                       column="parent_run")
    targets = curves if targets is None else targets
    out = BranchPredictions(law=law, settings={
        "stable_until": stable_until, "fit_branches": fit_branches if isinstance(
            fit_branches, str) else list(fit_branches), "from_step": float(options.from_step),
        "offset": bool(offset)})
    for parent, branches in fams.items():
        chosen = _chosen(branches, fit_branches)
        fitted = [_cut(curves[parent], stable_until)] + [curves[b] for b in chosen]
        try:
            fit = BRANCH_LAWS[law](fitted, options=fit_options, **(law_params or {}))
            gap = _offset(fit, fitted, targets) if offset else 0.0
        except FitError as err:
            out.failed[parent] = str(err)
            continue
        out.fits[parent], out.offsets[parent] = fit, gap
        parent_cut = fitted[0].steps.size < curves[parent].steps.size
        for run in [parent, *branches]:
            t = targets.get(run)
            if t is None or not t.steps.size:
                continue
            c = curves[run]
            pred = float(fit.predict(t.steps[-1:], c.lr_steps, c.lr, window=t.window[-1:])[0])
            pred += gap
            meas = float(t.loss[-1])
            out.ends.append(BranchEnd(
                run=run, parent=c.parent, branch_step=float(c.branch_step), step=float(
                    t.steps[-1]), measured=meas, predicted=pred, error=(pred - meas) / meas,
                fitted=run in chosen or (run == parent and not parent_cut)))
    return out
