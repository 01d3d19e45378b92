"""The report's first section (fitting.report.extrapolation): backtests judged against the
measured seed noise, on studies whose truth is known."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from fitting.report.extrapolation import (
    FAILS,
    HOLDS,
    LARGER_SIZE,
    NO_NOISE,
    extrapolation_rows,
)
from fitting.report.sections import Report
from fitting.report.view import prepare_view
from fitting.report.writer import write_report
from fitting.test_utils import make_final_table

SIZES = [1e5, 3e5, 1e6, 3e6, 1e7]
#: each seed's relative offset from the truth: seed means are exact, σ_seed = √2·D relative
D = 0.002


def _seeded(largest_off: float = 1.0, seeds: int = 2) -> pd.DataFrame:
    """An exact eq. 7 study (make_final_table without noise) at two seeds ±D around the truth;
    the largest size's losses × ``largest_off`` (the law does not reach it)."""
    truth = make_final_table(sizes=SIZES, weights=(0.3, 0.5, 1.0), noise=0.0)
    truth.loc[truth["n"] == max(SIZES), "value"] *= largest_off
    sign = [1.0, -1.0][:seeds]
    return pd.concat([truth.assign(seed=s, run_id=truth["run_id"] + f"_s{s}",
                                   value=truth["value"] * (1 + sign[s] * D))
                      for s in range(seeds)], ignore_index=True)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("extrapolation")
    tables = {"exact": _seeded(), "off": _seeded(largest_off=1.10), "single": _seeded(seeds=1)}
    return {k: json.load(open(write_report(t, str(out / k), uncertainty=None, n_refits=4)
                              .json_path)) for k, t in tables.items()} | {"dir": out}


def _larger(fits: dict) -> dict[str, dict]:
    return {r["pair"]: r for r in fits["extrapolation"]["rows"] if r["kind"] == LARGER_SIZE}


def test_exact_law_with_small_seed_noise_holds(reports):
    rows = _larger(reports["exact"])
    assert set(rows) == {"en-de", "en-zh"}
    for r in rows.values():
        assert r["sigma"] == pytest.approx(np.sqrt(2) * D, rel=1e-6)  # the measured seed sd
        assert r["rmse"] < 3 * r["sigma"] and r["verdict"] == HOLDS
    assert "trustworthy within the seed noise" in reports["exact"]["extrapolation"][
        "statements"][LARGER_SIZE]


def test_largest_size_off_the_law_by_ten_percent_does_not_hold(reports):
    rows = _larger(reports["off"])
    for r in rows.values():
        assert r["rmse"] > 0.05 and r["verdict"] == FAILS
    assert reports["off"]["extrapolation"]["statements"][LARGER_SIZE].startswith(
        "Predictions at larger sizes: not trustworthy beyond the noise")


def test_without_seed_repeats_the_backtest_is_information(reports):
    """No seed noise measured: no fallback to the fit's residuals; the error is shown."""
    for r in _larger(reports["single"]).values():
        assert r["sigma"] is None and r["verdict"] == NO_NOISE and r["rmse"] is not None


def test_extrapolation_is_the_first_section(reports):
    md = (reports["dir"] / "exact" / "report.md").read_text()
    sections = re.findall(r"^## (.+)$", md, flags=re.M)
    assert sections[0] == "How far the predictions can be trusted"


def test_cooled_law_backtest_is_judged_against_the_seed_noise_not_its_own():
    """With a cooled-down L(N, D) fit, its backtest errors are the row's; the fit's own noise
    level (here a residual sd far above the seed noise) plays no part."""
    view = prepare_view(_seeded())
    bt = {"errors": [{"d": 1.0, "p": 0.5, "error": e} for e in (0.02, -0.03)],
          "held_out_n": 1e7, "noise_rel": 0.5, "within": True}
    cooled = SimpleNamespace(pairs=["en-de"], backtest={"en-de": bt},
                             meta={"backtest_failed": {}})
    rep = Report(out_dir="", markdown_path="", html_path="", json_path="")
    rows = {r["pair"]: r for r in extrapolation_rows(rep, view, cooled)
            if r["kind"] == LARGER_SIZE}
    assert rows["en-de"]["rmse"] == pytest.approx(np.sqrt((0.02 ** 2 + 0.03 ** 2) / 2))
    assert rows["en-de"]["worst"] == pytest.approx(0.03)
    assert rows["en-de"]["verdict"] == FAILS  # 2.5 % > 3 × 0.28 %
    assert rows["en-zh"]["law"] == "joint law (eq. 7)"  # not fitted by L(N, D): eq. 7's backtest
