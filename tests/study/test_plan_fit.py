"""`mnmt-study plan --mesh`'s search for a configuration that fits (mnmt.study.fit_search.fit_search),
on made-up compile results: the order of the candidates, when it stops, and what it reports."""

from __future__ import annotations

import pytest

from mnmt.study import fit_search, mesh_plan
from mnmt.study.spec import PRESETS

MIB = 2**20
SPEC = PRESETS["ci"].replace(sizes=("mini-1",))


def fake_memory(fixed=10, logits=8, activations=64, remat=None):
    """A made-up compiler: total MiB = fixed + logits/tiles + activations/k · remat share."""
    remat = remat or {"none": 1.0, "minimal": 0.8, "full": 0.3}
    calls = []

    def compile_fn(spec):
        calls.append(fit_search.savers(spec))
        share = remat[spec.compute.remat_policy]
        total = fixed + logits / spec.compute.loss_tiles + activations / spec.compute.gradient_accumulation_steps * share
        return {"size": "mini-1", "per_device_bytes": int(total * MIB)}

    return compile_fn, calls


BASE = {"size": "mini-1", "per_device_bytes": 82 * MIB, "fits": False, "devices": 4,
        "peak_tflops": 100.0, "model_flops_per_step": 4e12, "output_projection_flops": 4e11,
        "param_bytes": 100 * MIB, "remat_policy": "none"}


def search(budget_mib, rows_per_device=16, **kw):
    compile_fn, calls = fake_memory(**kw)
    out = fit_search.fit_search(SPEC, BASE, rows_per_device, budget_mib * MIB, compile_fn)
    return out, calls


def test_the_tiled_loss_alone_when_it_is_enough():
    out, calls = search(78)  # 10 + 1 + 64 = 75 MiB with 8 tiles
    assert calls == [{"loss_tiles": 8, "gradient_accumulation_steps": 1, "remat_policy": "none"}]
    fit = out["fit_with"]
    assert fit["loss_tiles"] == 8 and fit["gradient_accumulation_steps"] == 1
    assert fit["total_bytes"] == 75 * MIB and out["shortfall_bytes"] == 0
    # cost model: compute 4e12 / 4 / 1e14 = 10 ms, plus the recomputed projection 1 ms
    assert fit["step_time_bound_s"] == pytest.approx(0.011)


def test_accumulation_jumps_to_the_predicted_divisor_then_stops_at_the_first_fit():
    # tiles: 75; k=2: 43 (no); the line through (1, 75), (2, 43) predicts k ≥ 64/(20 − 11) ≈ 7.1
    # -> the first divisor of 16 at or above it is 8: 11 + 8 = 19 MiB fits
    out, calls = search(20)
    # then remat minimal at k=2, cheaper by the cost model (11 + 1 ms < 11 + 1.8 ms), is tried and
    # does not fit (36.6 MiB); remat full at k=2 would cost more than k=8: not compiled
    assert [(c["gradient_accumulation_steps"], c["remat_policy"]) for c in calls] == \
        [(1, "none"), (2, "none"), (8, "none"), (2, "minimal")]
    assert all(c["loss_tiles"] == 8 for c in calls)
    fit = out["fit_with"]
    assert (fit["gradient_accumulation_steps"], fit["total_bytes"]) == (8, 19 * MIB)
    # 7 extra micro-batches, each 3 × 100 MiB at 1200 GB/s
    assert fit["step_time_bound_s"] == pytest.approx(0.011 + 7 * 3 * 100 * MIB / 1.2e12)


def test_remat_after_the_largest_accumulation_and_the_shortfall_when_nothing_fits():
    # accumulation 16 leaves 11 + 4 = 15 MiB; minimal 14.2, full 12.2 MiB
    out, calls = search(13)
    assert [(c["gradient_accumulation_steps"], c["remat_policy"]) for c in calls][-2:] == \
        [(16, "minimal"), (16, "full")]
    assert out["fit_with"]["remat_policy"] == "full"
    assert out["fit_with"]["step_time_bound_s"] > 4 / 3 * 0.010  # remat full's 4/3 compute
    out, calls = search(5)
    assert out["fit_with"] is None
    assert out["shortfall_bytes"] == int(12.2 * MIB) - 5 * MIB
    assert len(out["fit_tried"]) == len(calls) <= 1 + fit_search.MAX_ACCUMULATION_COMPILES + 2


def test_next_accumulation_at_least_doubles_and_stays_a_divisor():
    options = [2, 61, 122]  # 122 rows per data-axis device (fernandes on 16x4)
    assert fit_search.next_accumulation(options, [(1, 100), (2, 60)], 90) == 61
    assert fit_search.next_accumulation(options, [(1, 100), (61, 20)], 10) == 122
    assert fit_search.next_accumulation(options, [(1, 100), (122, 20)], 10) is None
    assert fit_search.divisors(12) == [1, 2, 3, 4, 6, 12]


def test_a_size_that_fits_keeps_its_settings_and_the_table_gets_no_fit_lines():
    plan = {**BASE, "fits": True, "per_device_bytes": MIB, "step_time_s_lower_bound": 0.01}
    out = mesh_plan.size_fit(SPEC, plan, (2, 2), 32, 1.0, 100.0, 10.0, lambda text: None)
    assert out["fit_with"] == {"gradient_accumulation_steps": 1, "loss_tiles": 1,
                               "remat_policy": "none", "total_bytes": MIB,
                               "step_time_bound_s": 0.01}
    assert mesh_plan.format_fits([{**plan, **out}], 16, 1.0) == []
    misfit = {**BASE, **search(20)[0]}
    lines = mesh_plan.format_fits([misfit], 16, 0.02)
    assert "how to fit" in lines[0]
    row = next(line for line in lines if line.startswith("mini-1"))
    assert row.split()[3:6] == ["8", "8", "none"]  # tiles, accumulation, remat


def test_the_study_fields_reach_each_runs_train_config_and_are_checked():
    from pathlib import Path

    from mnmt.study.runner import StudyData, make_train_config
    from mnmt.study.spec import StudyError, expand

    spec = SPEC.replace(loss_tiles=4, gradient_accumulation_steps=2)
    run = expand(spec)[0]
    data = StudyData(vocabulary_path="", tasks={p: p for p in spec.pairs}, irreducible_loss={})
    config = make_train_config(spec, run, data, Path("x"), mixture_name="plan")
    assert (config.loss_tiles, config.gradient_accumulation_steps) == (4, 2)
    assert make_train_config(SPEC, run, data, Path("x"), mixture_name="plan").loss_tiles == 1
    with pytest.raises(StudyError, match="StudySpec.loss_tiles: expected a positive integer"):
        SPEC.replace(loss_tiles=0)


def test_a_study_that_already_tiles_is_searched_from_its_own_settings():
    compile_fn, calls = fake_memory()
    spec = SPEC.replace(loss_tiles=8, gradient_accumulation_steps=2)
    base = {**BASE, "per_device_bytes": 43 * MIB}  # 10 + 1 + 32
    out = fit_search.fit_search(spec, base, 16, 20 * MIB, compile_fn)
    assert calls[0] == {"loss_tiles": 8, "gradient_accumulation_steps": 4, "remat_policy": "none"}
    assert out["fit_with"]["gradient_accumulation_steps"] > 2


def test_remat_at_the_smaller_accumulation_when_the_large_one_costs_more():
    """122 rows per device allow 2, 61, 122: k=61 fits but its 60 extra passes over 1 GiB of
    parameters cost more than remat minimal at k=2, which fits too and is kept."""
    compile_fn, calls = fake_memory(fixed=10, logits=8, activations=64, remat={
        "none": 1.0, "minimal": 0.5, "full": 0.3})
    base = {**BASE, "param_bytes": 1024 * MIB}
    out = fit_search.fit_search(SPEC, base, 122, 30 * MIB, compile_fn)
    assert [(c["gradient_accumulation_steps"], c["remat_policy"]) for c in calls] == \
        [(1, "none"), (2, "none"), (61, "none"), (2, "minimal")]
    fit = out["fit_with"]
    assert (fit["gradient_accumulation_steps"], fit["remat_policy"]) == (2, "minimal")
    assert fit["total_bytes"] == 27 * MIB  # 10 + 1 + 32 × 0.5
