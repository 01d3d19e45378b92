"""benchmarks/validation/compare_outputs.py: two JSON outputs compared number by number."""

from __future__ import annotations

import math


def test_equal_outputs_are_the_same_and_timings_do_not_count(benchmark_script):
    compare = benchmark_script("compare_outputs").compare
    a = {"fit": {"params": [1.0, 2.5], "nan": math.nan}, "meta": {"timing_s": {"total": 0.7}},
         "note": "fitting.report.writer"}
    b = {"fit": {"params": [1.0, 2.5], "nan": math.nan}, "meta": {"timing_s": {"total": 0.3}},
         "note": "fitting.report.writer"}
    out = compare(a, b, rtol=1e-12)
    assert out["numbers_compared"] == 3 and out["max_rel_diff"] == 0.0
    assert not (out["numbers_differ"] or out["only_base"] or out["only_new"]
                or out["texts_differ"])


def test_a_changed_number_a_missing_key_and_a_changed_text_are_found(benchmark_script):
    compare = benchmark_script("compare_outputs").compare
    a = {"fit": {"params": [1.0, 2.5]}, "gone": 1, "note": "a"}
    b = {"fit": {"params": [1.0, 2.5000001]}, "new": 2, "note": "b"}
    out = compare(a, b, rtol=1e-12)
    assert out["numbers_differ"] == ["/fit/params[1]: 2.5 → 2.5000001"]
    assert out["max_rel_diff"] > 1e-8
    assert out["only_base"] == ["/gone"] and out["only_new"] == ["/new"]
    assert out["texts_differ"] == ["/note: 'a' → 'b'"]
