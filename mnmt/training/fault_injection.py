"""Test-only fault injection of the training loop: a NaN loss at a chosen step.

Read once when a group starts training: with ``MNMT_TEST_NAN_AT_STEP=k`` the parameters going
into step k are multiplied by NaN on the host (only those of the runs named by
``MNMT_TEST_NAN_RUN=RUN_ID[,RUN_ID…]`` when that is set), so step k's loss is NaN, as after a
real divergence (docs/reliability.md). Unset, the loop pays one integer comparison per step.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import jax
import numpy as np

__all__ = ["NAN_AT_STEP_ENV", "NAN_RUN_ENV", "nan_injection", "poisoned"]

NAN_AT_STEP_ENV = "MNMT_TEST_NAN_AT_STEP"
NAN_RUN_ENV = "MNMT_TEST_NAN_RUN"


def nan_injection() -> tuple[int | None, set[str] | None]:
    """The test-only NaN injection (NAN_AT_STEP_ENV, NAN_RUN_ENV): (step or None, the run ids
    to poison or None for every run). Raises ValueError naming the variable on a bad value."""
    text = os.environ.get(NAN_AT_STEP_ENV, "").strip()
    if not text:
        return None, None
    try:
        step = int(text)
    except ValueError:
        raise ValueError(f"{NAN_AT_STEP_ENV}={text!r}: expected a step number") from None
    runs = os.environ.get(NAN_RUN_ENV, "").strip()
    return step, ({r for r in runs.split(",") if r} or None)


def poisoned(state: dict, run_ids: Sequence[str], runs: set[str] | None, *, grouped: bool,
             shardings) -> dict:
    """`state` with the parameters of `runs` (None: every run) multiplied by NaN; `run_ids`
    are the group's runs in order (a leading run axis when `grouped`)."""
    factor = np.array([np.nan if runs is None or r in runs else 1.0 for r in run_ids],
                      np.float32)
    if not grouped:
        factor = factor[0]

    def times(x):
        if not np.issubdtype(x.dtype, np.floating):
            return x
        return x * np.reshape(factor, np.shape(factor) + (1,) * (x.ndim - factor.ndim))

    params = jax.device_put(jax.tree.map(times, state["params"]), shardings)
    return {**state, "params": params}
