"""benchmarks/speed/main_job_stages.py's clock: a part entered inside another is counted once,
in the inner part, not again in the outer one; compilations are booked to the open stage."""

from __future__ import annotations

import time


def _busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_nested_part_is_taken_out_of_the_outer_one(benchmark_script):
    stages = benchmark_script("main_job_stages")
    clock = stages.StageClock()
    clock.stage = "train mini-1"
    with clock.part("steps"):
        _busy(0.05)
        with clock.part("eval"):
            _busy(0.2)
    table = clock.table()["train mini-1"]
    assert table["eval"]["cpu_s"] >= 0.19
    assert table["steps"]["cpu_s"] < 0.15  # its own 0.05 s, not the eval's 0.2 s again
    assert abs(table["cpu_s"] - (table["eval"]["cpu_s"] + table["steps"]["cpu_s"])) < 0.02
    clock.on_duration("/jax/core/compile/backend_compile_duration", 1.5)
    clock.on_duration("/jax/core/compile/jaxpr_trace_duration", 9.0)  # not a compilation
    assert clock.table()["train mini-1"]["compile_wall_s"] == 1.5
