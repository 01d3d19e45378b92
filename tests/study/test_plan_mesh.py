"""`mnmt-study plan --mesh`: sharding plans of a study's sizes, checked by compiling one step on
simulated CPU devices (mnmt.study.mesh_plan)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mnmt.models import accounting, zoo
from mnmt.study import cli, fit_search, mesh_plan
from mnmt.study.runner import StudyData, make_train_config
from mnmt.study.spec import PRESETS, StudyError, StudySpec, expand

TINY = ["--preset", "ci", "--gin", "StudySpec.sizes=('mini-1', 'mini-2')"]
GIB = 2**30


def _plan_json(capsys, *extra: str) -> list[dict]:
    rc = cli.main(["plan", *TINY, "--mesh", "2x2", "--json", *extra])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def _norm_params(size: str, vocab_size: int) -> int:
    """RMSNorm scales: the only parameters with no axis the standard rules put on 'model'."""
    c = zoo.get_config(size, vocab_size)
    return (c.num_encoder_layers * 2 + 1 + c.num_decoder_layers * 3 + 1) * c.emb_dim


def test_tiny_study_on_a_2x2_mesh_reports_shard_bytes_memory_and_flops(capsys):
    plans = _plan_json(capsys, "--device-memory-gib", "1")
    vocab = PRESETS["ci"].vocab_size
    assert [p["size"] for p in plans] == ["mini-1", "mini-2"]
    for p in plans:
        total = accounting.param_counts(zoo.get_config(p["size"], vocab)).total
        norms = _norm_params(p["size"], vocab)
        # float32 parameters; every matrix, embedding and relative-position table is split over
        # the model axis (2), the norm scales are replicated; the data axis splits none of them.
        assert p["param_bytes"] == 4 * ((total - norms) // 2 + norms)
        assert p["params"] == total
        assert p["opt_state_bytes"] > 0
        assert p["memory_source"] == "compiled.memory_analysis()"
        assert p["per_device_bytes"] >= p["param_bytes"] + p["opt_state_bytes"]
        assert p["memory"]["temp_bytes"] > 0
        assert p["fits"] is True
        assert p["rows"] == 32 and p["devices"] == 4
        # compiled FLOPs of the whole mesh against the exact count: same order, not below it
        assert 0.9 * p["model_flops_per_step"] <= p["flops_per_step"] <= 2 * p["model_flops_per_step"]
        assert p["step_time_s_lower_bound"] == pytest.approx(
            p["flops_per_device"] / (mesh_plan.DEFAULT_PEAK_TFLOPS * 1e12))
    assert plans[1]["param_bytes"] > plans[0]["param_bytes"]


def test_fits_flips_when_the_device_memory_is_below_the_per_device_total(capsys):
    one = ["--gin", "StudySpec.sizes=('mini-1',)"]
    [roomy] = _plan_json(capsys, *one, "--device-memory-gib", "1")
    assert roomy["fits"] is True
    smaller = roomy["per_device_bytes"] * 0.9 / GIB
    [tight] = _plan_json(capsys, *one, "--device-memory-gib", f"{smaller:.9f}")
    assert tight["per_device_bytes"] == roomy["per_device_bytes"]
    assert tight["fits"] is False
    # the search compiled the tiled loss first (the cheapest saver) and it fits (a real compile)
    assert roomy["fit_with"]["loss_tiles"] == 1 and "fit_tried" not in roomy
    assert tight["fit_tried"][0]["loss_tiles"] == fit_search.LOSS_TILE_CHOICES[0]
    fit = tight["fit_with"]
    assert fit is not None and fit["total_bytes"] <= smaller * GIB < tight["per_device_bytes"]
    assert fit["step_time_bound_s"] >= tight["step_time_s_lower_bound"] * 0.9


@pytest.mark.parametrize(("args", "option", "expected"), [
    (["--mesh", "2by2", "--device-memory-gib", "1"], "--mesh", "DATAxMODEL"),
    (["--mesh", "0x2", "--device-memory-gib", "1"], "--mesh", "positive integers"),
    (["--mesh", "1x3", "--device-memory-gib", "1"], "--mesh 1x3", "num_heads = 4"),
    (["--mesh", "64x1", "--device-memory-gib", "1"], "--mesh 64x1", "fewer than the data-parallel"),
    (["--mesh", "2x2", "--devices", "8", "--device-memory-gib", "1"], "--devices", "4 devices"),
    (["--mesh", "2x2"], "--device-memory-gib", "positive number"),
    (["--rules", "fsdp"], "--rules", "only with --mesh"),
    (["--mesh", "2x2", "--device-memory-gib", "1", "--rules", "zero3"], "--rules",
     "standard, fsdp"),
    (["--mesh", "3x1", "--device-memory-gib", "1", "--rules", "fsdp"], "--mesh 3x1",
     "must divide mini-1's emb_dim"),
])
def test_a_bad_mesh_or_option_is_one_line_naming_it(capsys, args, option, expected):
    rc = cli.main(["plan", *TINY, *args])
    captured = capsys.readouterr()
    assert rc == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"mnmt-study: error: {option}") and expected in lines[0]
    assert captured.out == ""


def test_parse_mesh():
    assert mesh_plan.parse_mesh("16x4") == (16, 4)
    assert mesh_plan.parse_mesh("64X1") == (64, 1)


def test_without_memory_analysis_the_total_is_a_labelled_estimate():
    raw = {"size": "s", "devices": 4, "state_bytes": 100, "batch_bytes": 10, "memory": None,
           "compiled_flops_per_device": None, "model_flops_per_step": 4e12}
    plan = mesh_plan.summarise(raw, device_memory_gib=1.0, peak_tflops=100.0)
    assert plan["per_device_bytes"] == 210
    assert plan["memory_source"].startswith("estimate")
    assert plan["flops_source"].startswith("estimate")
    assert plan["flops_per_step"] == pytest.approx(4e12)
    assert plan["step_time_s_lower_bound"] == pytest.approx(1e12 / 100e12)


@pytest.mark.parametrize("loops", [{"gradient_accumulation_steps": 2}, {"loss_tiles": 8}])
def test_a_step_with_loops_is_timed_from_the_exact_flops_not_the_compiled_count(loops):
    """XLA's cost analysis counts a loop body once: an accumulating or tiled step's compiled
    FLOPs would make its step-time bound too small, so the exact count is used."""
    raw = {"size": "s", "devices": 4, "state_bytes": 100, "batch_bytes": 10, "memory": None,
           "compiled_flops_per_device": 0.6e12, "model_flops_per_step": 4e12}
    plain = mesh_plan.summarise(raw, device_memory_gib=1.0, peak_tflops=100.0)
    assert plain["flops_per_device"] == pytest.approx(0.6e12)  # no loop: the compiled count
    looped = mesh_plan.summarise({**raw, **loops}, device_memory_gib=1.0, peak_tflops=100.0)
    assert looped["flops_per_device"] == pytest.approx(1e12)
    assert looped["step_time_s_lower_bound"] == pytest.approx(1e12 / 100e12)
    assert "loops" in looped["flops_source"]


def test_a_failed_size_is_reported_not_fitted():
    plan = mesh_plan.summarise({"size": "s", "error": "boom"}, 1.0, 275.0)
    assert plan["fits"] is None and plan["per_device_bytes"] is None and plan["error"] == "boom"


def test_activation_dtype_and_remat_policy_reach_each_runs_train_config():
    spec = StudySpec.of(sizes=("mini-1",), weights=(0.5,), activation_dtype="bfloat16",
                     remat_policy="full")
    run = expand(spec)[0]
    data = StudyData(vocabulary_path="", tasks={p: p for p in spec.pairs}, irreducible_loss={})
    config = make_train_config(spec, run, data, Path("unused"), mixture_name="m")
    assert (config.activation_dtype, config.remat_policy) == ("bfloat16", "full")
    with pytest.raises(StudyError, match="StudySpec.activation_dtype"):
        StudySpec.of(activation_dtype="float16")
    with pytest.raises(StudyError, match="StudySpec.remat_policy"):
        StudySpec.of(remat_policy="some")


def test_the_paper_scale_study_trains_in_bfloat16():
    from mnmt.study.stages import load_spec

    assert load_spec("fernandes_en_de_zh", None, []).compute.activation_dtype == "bfloat16"


def test_fsdp_rules_split_the_parameters_over_the_data_axis_too(capsys):
    one = ["--gin", "StudySpec.sizes=('mini-1',)", "--device-memory-gib", "1"]
    [standard] = _plan_json(capsys, *one)
    [fsdp] = _plan_json(capsys, *one, "--rules", "fsdp")
    assert (standard["partitioning_rules"], fsdp["partitioning_rules"]) == ("standard", "fsdp")
    c = zoo.get_config("mini-1", PRESETS["ci"].vocab_size)
    total, norms = fsdp["params"], _norm_params("mini-1", c.vocab_size)
    rel = 2 * c.num_heads * c.relative_attention_num_buckets  # one table per stack: model only
    # 2x2: matrices over model and data (/4); norm scales over data, rel tables over model (/2)
    assert fsdp["param_bytes"] == 4 * ((total - norms - rel) // 4 + (norms + rel) // 2)
    assert standard["param_bytes"] == 4 * ((total - norms) // 2 + norms)
    assert fsdp["opt_state_bytes"] < standard["opt_state_bytes"]


def test_partitioning_rules_reach_each_runs_train_config():
    spec = StudySpec.of(sizes=("mini-1",), weights=(0.5,), partitioning_rules="fsdp")
    data = StudyData(vocabulary_path="", tasks={p: p for p in spec.pairs}, irreducible_loss={})
    config = make_train_config(spec, expand(spec)[0], data, Path("unused"), mixture_name="m")
    assert config.partitioning_rules == "fsdp"
    assert mesh_plan.with_rules(spec, "standard").compute.partitioning_rules == "standard"
    assert mesh_plan.with_rules(spec, None) is spec
    with pytest.raises(StudyError, match="StudySpec.partitioning_rules: expected one of "
                                         "standard, fsdp, got 'zero3'"):
        StudySpec.of(partitioning_rules="zero3")
