"""The options objects the law fitters share: defaults, and the flat names a user types."""

from __future__ import annotations

import pytest

from fitting.core.options import (
    NO_UNCERTAINTY,
    BacktestOptions,
    FitOptions,
    UncertaintyOptions,
    grouped_options,
)


def test_flat_names_become_their_options_objects():
    kw = grouped_options({"f_scale": 0.05, "n_refits": 7, "seed": 3, "noise_level": 0.01,
                          "backtest_tolerance": 2.0, "form": "eq13"})
    assert kw == {"fit_options": FitOptions(f_scale=0.05),
                  "uncertainty": UncertaintyOptions(n_refits=7, seed=3),
                  "backtest": BacktestOptions(noise_level=0.01, tolerance=2.0), "form": "eq13"}


def test_backtest_false_means_no_backtest_and_untouched_groups_stay_out():
    assert grouped_options({"backtest": False, "uncertainty": None}) == {
        "uncertainty": NO_UNCERTAINTY, "backtest": None}
    assert grouped_options({"backtest": True}) == {}


def test_options_are_frozen():
    with pytest.raises(AttributeError):
        FitOptions().f_scale = 1.0  # type: ignore[misc]
