"""Adaptive studies whose target is the K-pair recommendation's objective
(`StudySpec.adaptive_target = "objective"`, 3 pairs or more).

The pool is the grid's design runs: its sizes × its design mixtures (and `adaptive_sizes`); the
seed repeats and the held-out runs train first, in round 0, since the held-out mixtures
calibrate the objective's interval. Round 0 trains every design mixture at the smallest size.
Each later round fits the design law — every pair's log loss across sizes and mixtures, eq. 11
with a transfer matrix (`fitting.design.laws.mixture_across_sizes`) — and reads the
recommendation's objective J = Σ π_i L_i / Σ π_i at the report's target size with its 95 %
predictive interval as the report computes it (`report_interval`: the mixture laws compared and
the recommendation made by `fitting.report.sections.mixture.mixture_run_table`); while that
interval of log J is wider than ±`adaptive_threshold`, the next batch is the pool runs that most
shrink the predicted variance of log J at the recommended weights per FLOP
(`fitting.design.plan.plan_batch` with `fitting.design.laws.mixture_objective`). Rounds,
records, resumes and stops are `mnmt.study.adaptive.grow`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fitting.design.laws import mixture_across_sizes, mixture_objective
from fitting.design.parametric import ParametricFit, ParametricLaw
from fitting.design.plan import current_target_sd
from fitting.design.simulate import FitSettings
from fitting.intervals.predictive import quantile
from fitting.laws.mixture.domain import EpochCap, over_epoch_cap
from mnmt.study import mixture_design
from mnmt.study.adaptive import (
    AdaptiveDesign,
    Estimate,
    Interval,
    Measure,
    candidate_runs,
    fixed_runs,
    pool_costs,
)
from mnmt.study.design_pool import non_embedding
from mnmt.study.spec import RunSpec, StudySpec, with_branches
from mnmt.study.spec_checks import StudyError
from mnmt.study.stages import mixture_constraints

__all__ = ["ObjectiveDesign", "adaptive_design", "measure_from_runs", "report_interval"]


def adaptive_design(spec: StudySpec) -> AdaptiveDesign:
    """The design of an adaptive study: of the objective (`ObjectiveDesign`) or of E
    (`mnmt.study.adaptive.AdaptiveDesign`), as `adaptive_target` says."""
    if spec.adaptive.adaptive_target == "objective":
        return ObjectiveDesign(spec)
    return AdaptiveDesign(spec)


class ObjectiveDesign(AdaptiveDesign):
    """The design of an adaptive study of the recommendation's objective: its pool, every run's
    inputs and cost, the design law and the objective on its parameters."""

    initial_what = "every design mixture at the smallest size"
    why = "largest drop in the objective's variance per FLOP"

    def __init__(self, spec: StudySpec) -> None:  # noqa: PLW0231  nothing of E's design applies
        self.spec, self.pairs = spec, list(spec.pairs)
        self.pool = candidate_runs(spec)
        self.cost, self.budget = pool_costs(spec, self.pool)
        prefs = mixture_design.preferences(spec) or dict.fromkeys(spec.pairs, 1.0)
        self.preferences = np.array([prefs[p] for p in spec.pairs], float)
        self.law: ParametricLaw = mixture_across_sizes(len(self.pairs))
        self.objective = mixture_objective(self.law, len(self.pairs), self.preferences)
        sizes = {r.size for r in self.pool} | set(spec.sizes)
        self.n = {size: float(non_embedding(spec, size)) for size in sizes}
        self.target_n = float(spec.report_target_sizes[0])  # the report's recommendation's N
        self.constraints = mixture_constraints(spec) or {}
        cap = self.constraints.get("epoch_cap")
        self.epoch_cap = EpochCap(self.constraints["budget_examples"], cap) if cap else None
        self.data_sizes = [dict(spec.data_caps).get(p) for p in spec.pairs]

    @property
    def label(self) -> str:
        return "objective J"

    @property
    def goal(self) -> str:
        return "the recommendation's objective J"

    def round_zero_runs(self) -> list[RunSpec]:
        """Every design mixture of the pool at the smallest size of `StudySpec.sizes`."""
        smallest = min(self.spec.sizes, key=lambda size: self.n[size])
        return [r for r in self.pool if r.size == smallest]

    def fixed_first(self) -> list[RunSpec]:
        """The seed repeats and the held-out runs: the held-out mixtures calibrate the
        objective's interval from round 1 on."""
        repeats, held = fixed_runs(self.spec)
        return [*repeats, *held]

    def header(self) -> dict:
        return {"target": "objective", "pairs": self.pairs,
                "preferences": self.preferences.tolist(), "target_size": self.target_n,
                "threshold": self.spec.adaptive.adaptive_threshold, "budget": self.budget,
                "law": self.law.name, "params": list(self.law.param_names)}

    def run_weights(self, run: RunSpec) -> np.ndarray:
        """The run's weight of every pair, in the study's order."""
        return np.array([run.weights.get(p, 0.0) for p in self.pairs], float)

    def inputs(self, run: RunSpec) -> np.ndarray:
        """(u, w_1 … w_K, m_1 … m_K): N / the target's N, the run's weights, and 1 where the
        pair's loss is in the mixture laws' domain (trained, not over the epoch cap)."""
        w = self.run_weights(run)
        inside = (w > 0) & ~over_epoch_cap(w[None, :], self.data_sizes, self.epoch_cap)[0]
        return np.array([self.n[run.size] / self.target_n, *w, *inside], float)

    def target_inputs(self, weights: np.ndarray) -> np.ndarray:
        """The objective's inputs at ``weights`` and the target size."""
        return np.array([[1.0, *weights, *np.ones(len(self.pairs))]])

    def stand_in(self, fit: ParametricFit) -> np.ndarray:
        """The recommendation's stand-in where no report gives one: of the pool's mixtures that
        train every pair of the objective inside the laws' domain (the report's J is not
        defined elsewhere: a zero-shot or over-repeated pair; all mixtures where none does),
        the one of the lowest objective the design law predicts at the target size."""
        mixtures = {tuple(self.run_weights(r)): self.inputs(r) for r in self.pool}
        wanted = self.preferences > 0
        inside = [w for w, x in mixtures.items() if x[1 + len(self.pairs):][wanted].all()]
        mixtures = np.array(sorted(inside or mixtures))
        X = np.stack([self.target_inputs(w)[0] for w in mixtures])
        values = self.objective.predict_u(fit.u, X)[:, 0]
        return mixtures[int(np.nanargmin(np.where(np.isfinite(values), values, np.inf)))]

    def target(self, fit: ParametricFit, estimate: Estimate | None = None
               ) -> tuple[np.ndarray, ParametricLaw | None]:
        """log J at the recommended weights (``estimate``'s, else `stand_in`'s)."""
        given = (estimate.detail.get("weights") if estimate else None) or None
        w = (np.array([given.get(p, 0.0) for p in self.pairs], float) if given
             else self.stand_in(fit))
        return self.target_inputs(w), self.objective

    def dof(self, n_runs: int) -> int:
        """Residual degrees of freedom on ``n_runs`` runs: every pair's value less the
        parameters, at least 1 (a plan counts a run's losses outside the domain too)."""
        return max(n_runs * len(self.pairs) - self.law.n_params, 1)

    def fit(self, runs: Sequence[RunSpec], losses: dict[str, np.ndarray], round_number: int,
            warm: np.ndarray | None = None) -> tuple[ParametricFit, Estimate]:
        """The design law fitted on ``runs`` (log losses in the domain, 0 outside: they cost
        nothing) and its own interval of J at the stand-in's weights: linearised, t_{0.975,dof}
        · sd of log J, the residual variance over the losses in the domain."""
        X = np.stack([self.inputs(r) for r in runs])
        inside = X[:, 1 + len(self.pairs):] > 0
        with np.errstate(all="ignore"):
            y = np.where(inside, np.log(np.stack([np.asarray(losses[r.run_id], float)
                                                  for r in runs])), 0.0)
        fit = FitSettings().fit(self.law, X, y, np.random.default_rng(round_number), warm=warm)
        dof = max(int(inside.sum()) - self.law.n_params, 1)
        fit = dataclasses.replace(fit, sigma2=fit.rss / dof)
        w = self.stand_in(fit)
        X_t = self.target_inputs(w)
        sd = float(current_target_sd(fit, X, X_t, self.objective)[0])
        J = float(np.exp(self.objective.predict_u(fit.u, X_t)[0, 0]))
        half = quantile(0.95, dof) * sd
        return fit, Estimate(J, J * float(np.exp(-half)), J * float(np.exp(half)), "design law",
                             {"sd_log": sd, "dof": dof,
                              "weights": dict(zip(self.pairs, w.tolist(), strict=True))},
                             name="J")

    def study_measure(self, runs_dir: Path, eval_set: str) -> Measure:
        return measure_from_runs(self, runs_dir, eval_set)

    def study_interval(self, runs_dir: Path, eval_set: str) -> Interval:
        return report_interval(self, runs_dir, eval_set)


def measure_from_runs(design: ObjectiveDesign, runs_dir: Path, eval_set: str) -> Measure:
    """A `Measure`: each run's last evaluated loss of every pair on ``eval_set`` (NaN for a pair
    the run did not evaluate: outside the domain it is not fitted)."""
    from fitting.data.rundirs import read_run_dir  # noqa: PLC0415  pandas

    read: dict[str, np.ndarray] = {}  # a finished run's losses do not change: read once

    def losses(run_id: str) -> np.ndarray:
        if run_id not in read:
            table = read_run_dir(str(runs_dir / run_id))
            rows = table[(table["metric"] == "loss") & (table["eval_set"] == eval_set)]
            if rows.empty:
                raise StudyError(f"{runs_dir / run_id}: no loss on {eval_set!r} to fit the "
                                 "design on")
            last = rows.sort_values("step").groupby("pair")["value"].last()
            read[run_id] = np.array([float(last.get(p, np.nan)) for p in design.pairs])
        return read[run_id]

    return lambda runs: {r.run_id: losses(r.run_id) for r in runs}


def report_interval(design: ObjectiveDesign, runs_dir: Path, eval_set: str) -> Interval:
    """An `Interval`: the report's own — the mixture laws compared on the trained runs and the
    seed repeats, the held-out runs trained so far held out, the recommendation made at the
    report's target size under the study's constraints, and its objective's 95 % predictive
    interval (`fitting.report.sections.mixture.mixture_run_table`, what ``mnmt-fit mixture``
    and the report's section compute)."""
    from fitting.core.base import FitError  # noqa: PLC0415
    from fitting.data.rundirs import collect_runs  # noqa: PLC0415  pandas
    from fitting.report.sections.mixture import (  # noqa: PLC0415
        MixtureRunOptions,
        mixture_run_table,
    )

    spec = design.spec
    repeats, held = fixed_runs(spec)
    source = "the report's recommendation"

    def interval(trained: list[RunSpec]) -> Estimate:
        held_ids = {r.run_id for r in held}  # a held-out run not trained (yet) is left out
        runs = [r for r in with_branches(spec, [*repeats, *held, *trained])
                if r.run_id not in held_ids or (runs_dir / r.run_id / "run.json").exists()]
        table = collect_runs([str(runs_dir / r.run_id) for r in runs])
        ids = set(table["run_id"].astype(str))
        options = MixtureRunOptions(heldout_runs=[r.run_id for r in held if r.run_id in ids],
                                    target_size=design.target_n,
                                    constraints=design.constraints, eval_set=eval_set,
                                    n_boot=100, seed=0)
        try:
            payload = mixture_run_table(table, options)
        except FitError as err:
            return Estimate(np.nan, np.nan, np.nan, source, {"why": str(err)}, name="J")
        rec = payload.get("recommendation") or {}
        iv = rec.get("objective_interval") or {}
        if iv.get("lo95") is None:
            why = payload.get("recommendation_skipped") or "the recommendation has no interval"
            return Estimate(float(rec.get("objective", np.nan)), np.nan, np.nan, source,
                            {"why": why}, name="J")
        return Estimate(float(iv["estimate"]), float(iv["lo95"]), float(iv["hi95"]), source,
                        {"weights": rec["weights"], "calibrated": iv["calibrated"],
                         **{k: iv[k] for k in ("sd_resample", "sd_forms", "sd_extrapolation",
                                               "sd_total", "rule", "calibration_n") if k in iv}},
                        name="J")

    return interval
