"""What a report is asked for: :class:`ReportOptions`, the one settings object of
:func:`fitting.report.writer.write_report` (``mnmt-fit report``'s options and what
``mnmt-study`` passes: ground truth, target sizes, held-out and verification runs, the early
stop, the planned branches)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fitting.core.options import UncertaintyOptions
from fitting.report.predicted_budgets import BudgetPlan

__all__ = ["ReportOptions"]


@dataclass(frozen=True)
class ReportOptions:
    """The settings of one report.

    Attributes:
      ground_truth: ``{pair: L∞_true}`` printed next to the fitted L∞ (synthetic studies).
      target_sizes: model sizes N at which to predict the frontier and recommend weights
        (default: 4× and 16× the largest fitted size).
      title, eval_set, metric: the document's title; the eval set and metric fitted.
      uncertainty: the fits' interval settings (:class:`~fitting.core.options.
        UncertaintyOptions`: Fernandes footnote 5 perturbations, the refits, their seed).
      drop_invalid: drop rows with non-finite/non-positive losses (count reported) instead of
        raising FitError.
      preferences: ``{pair: importance}`` for the recommendation (default: equal).
      convergence_correction: a training step; final losses of runs with weight ≤ 0.05 are
        replaced by their learning-curve extrapolation to that step (Fernandes App. G).
      heldout_runs: run ids trained but never fitted: excluded from every fit, predicted in the
        section "Held-out runs" (:mod:`fitting.report.sections.heldout`); an id that is not a
        run of the table raises FitError.
      mixture_constraints: for tables of 3 pairs or more, the constraints of the mixture-law
        recommendation (:mod:`fitting.report.sections.mixture`): keys ``max_weights``
        {pair: w}, ``max_loss`` {pair: L}, ``preferences`` {pair: x}, ``budget_examples`` and
        ``epoch_cap``.
      verification: the runs that trained the mixture recommendation and its baselines
        (:mod:`fitting.report.sections.verification`: size, seeds, mixtures, runs), removed
        from the table before every fit.
      stop_fraction: the early stop's share of each run's steps (section "Early stop"); None:
        read from the table's stopped runs. Given for a table of full runs, each run is cut at
        its stop as if stopped and every end checks its prediction.
      design_rounds: an adaptive study's round records (mnmt.study.adaptive: round, chosen,
        costs, before, …), reported in section "Design rounds"
        (:mod:`fitting.report.sections.design_rounds`); () for a fixed design.
      branch_plan: the cool-down branches a study planned (:class:`~fitting.report.
        predicted_budgets.BudgetPlan`): those not trained are predicted for L(N, D).
    """

    ground_truth: dict[str, float] | None = None
    target_sizes: list[float] | None = None
    title: str = "Scaling-law report"
    eval_set: str = "validation"
    metric: str = "loss"
    uncertainty: UncertaintyOptions = field(default_factory=UncertaintyOptions)
    drop_invalid: bool = False
    preferences: dict[str, float] | None = None
    convergence_correction: float | None = None
    heldout_runs: Sequence[str] = ()
    mixture_constraints: dict | None = None
    verification: dict | None = None
    stop_fraction: float | None = None
    branch_plan: BudgetPlan | None = None
    design_rounds: Sequence[dict] = ()

