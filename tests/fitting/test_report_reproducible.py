"""A report is a function of its table: two writes of the same table give the same fits.json,
number for number, except the measured durations that benchmarks/studies/faults.py leaves out of its
kill-trial comparison. A new field that is not reproducible (a time, a count of something
measured, an unseeded draw) fails here, in the fast suite, instead of in `-m faults`."""

import json
import math
import os

from fitting import plots
from fitting.core.options import UncertaintyOptions
from fitting.report.writer import ReportOptions, write_report
from fitting.test_utils import make_curves_table, make_final_table


def _table():
    """Learning curves of 4 sizes, one weight as in the kill trials' ci study: every section that
    study reaches, L(N, D) included (the tokens grow with the step)."""
    tab = make_curves_table(make_final_table(sizes=[2e5, 1e6, 4e6, 2e7], weights=(0.5,),
                                             noise=0.01, seed=3))
    return tab.assign(tokens=tab["step"] * 512)


def test_two_reports_of_one_table_differ_only_in_measured_durations(tmp_path, monkeypatch,
                                                                    benchmark_script):
    faults = benchmark_script("faults")

    def empty_figure(fig, path, **kwargs):  # the pixels are not in fits.json: skip drawing them
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "wb").close()
        return path

    monkeypatch.setattr(plots, "save", empty_figure)
    tab = _table()
    docs = [json.loads(open(write_report(tab, str(tmp_path / name),
                                         ReportOptions(uncertainty=UncertaintyOptions(n_refits=3))).json_path).read())
            for name in ("a", "b")]
    assert docs[0]["chinchilla"]["fits"], docs[0]["skipped"]  # the section with the durations
    a, b = (faults.numbers(d) for d in docs)
    assert a.keys() == b.keys()
    differing = sorted(faults.field_name(k) for k in a
                       if a[k] != b[k] and not (math.isnan(a[k]) and math.isnan(b[k]))
                       and not faults.is_duration(k))
    assert differing == []
    # the rule excludes the durations the fits carry (the timing_s subtree, the backtest's and
    # the bootstrap's seconds) and nothing else
    excluded = {faults.field_name(k).split("/meta/", 1)[-1] for k in a if faults.is_duration(k)}
    assert excluded == {"timing_s/grid", "timing_s/total", "backtest/seconds",
                        "bootstrap/seconds"}
    # and the comparison the trials use agrees: the same table gives the same report
    for d, name in zip(docs, ("a", "b"), strict=True):
        assert json.loads((tmp_path / name / "fits.json").read_text()) == d
    assert faults.largest_difference(faults.fits_numbers(tmp_path / "a" / "fits.json"),
                                     faults.fits_numbers(tmp_path / "b" / "fits.json")) == (0.0,
                                                                                          None)
