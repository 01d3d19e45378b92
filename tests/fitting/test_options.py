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


def test_report_flags_become_the_reports_one_uncertainty_object(tmp_path, monkeypatch):
    """``mnmt-fit report``'s --uncertainty / --n-refits / --seed reach the report as one
    UncertaintyOptions; without them, the fits' own defaults."""
    from fitting.cli import reports
    from fitting.cli.entry import build_parser
    from fitting.report.writer import Report
    from fitting.test_utils import make_final_table

    table = tmp_path / "t.csv"
    make_final_table().to_csv(table, index=False)
    seen = []

    def fake_write_report(df, out, options):
        seen.append(options.uncertainty)
        return Report(out_dir=out, markdown_path="", html_path="", json_path="")

    monkeypatch.setattr(reports, "write_report", fake_write_report)
    base = ["report", "--input", str(table), "--out", str(tmp_path / "r")]
    for extra in (["--uncertainty", "none", "--n-refits", "7", "--seed", "3"], []):
        reports.report_command(build_parser().parse_args(base + extra))
    assert seen == [UncertaintyOptions(method=None, n_refits=7, seed=3), UncertaintyOptions()]


def test_bootstrap_only_laws_take_the_refits_up_to_a_cap():
    assert UncertaintyOptions(n_refits=100).capped_resamples(30) == 30
    assert UncertaintyOptions(n_refits=4).capped_resamples(30) == 4
    assert NO_UNCERTAINTY.capped_resamples(30) == 0
    assert UncertaintyOptions(method="none").capped_resamples(30) == 0
