"""Predictive intervals of stopped runs' predicted ends, calibrated on the check runs.

The interval of a stopped run's predicted end (:mod:`fitting.laws.curves.early_stop`) is
:func:`fitting.intervals.predictive.predictive_interval` with one term, fixed before any check is read: the RMS log error of the
same prediction made for the **check runs** (trained to T, cut at S), leaving out the run's own
experiment (its seeds: their errors are alike) — leave-one-experiment-out for a check, all
checks for a stopped run. The checks' errors already hold every source of error between a
prediction and a trained end (the fit's sensitivity, the law's misfit, the end's own noise), so
nothing is added to them; with fewer than :data:`MIN_CALIBRATION` such errors there is no
interval. The RMS of k errors is an sd on k degrees of freedom, so the quantiles are Student's
t on k (``rule="calibration"``): from 2, 3 or 5 errors normal quantiles would cover a nominal
95 % only about 81, 86 or 89 % of the time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fitting.intervals.predictive import IntervalTerm, predictive_interval
from fitting.laws.curves.early_stop import StoppedEnd

__all__ = ["MIN_CALIBRATION", "calibrated_intervals"]

#: the fewest check errors (other experiments) an interval is calibrated on
MIN_CALIBRATION = 2


def calibrated_intervals(ends: Sequence[StoppedEnd], experiment: dict[str, Any]) -> str:
    """Give each end its predictive interval (module docstring): the calibration sd of a check
    (``measured`` set) is the RMS log error of the checks of other experiments
    (``experiment[run]``), of a stopped run that of every check. Returns "" or why no end got
    one (too few checks)."""
    checks = [e for e in ends if e.measured is not None and e.measured > 0]
    logs = {e.run: math.log(e.predicted / e.measured) for e in checks}
    missing = 0
    for e in ends:
        own = experiment.get(e.run, e.run)
        errs = [v for r, v in logs.items() if e.measured is None or
                experiment.get(r, r) != own]
        if len(errs) < MIN_CALIBRATION:
            missing += 1
            continue
        sd = float(np.sqrt(np.mean(np.square(errs))))
        e.interval = predictive_interval(e.predicted, rule="calibration",
                                         calibration=IntervalTerm(sd=sd, dof=len(errs)))
    if not missing:
        return ""
    return (f"{missing} end(s) without an interval: fewer than {MIN_CALIBRATION} check errors "
            "of other experiments to calibrate on (StudySpec.stop_checks)")
