"""Batch rows the mesh's data axis does not divide are rounded down at config resolution.

The paper-scale study's 500K-token batches of 256-token targets are 1,953 rows, which no even
data axis divides; left alone, the first `make_array_from_process_local_data` of a step fails
deep inside JAX. `resolve_batch_size` rounds the rows down to a multiple of the data-parallel
size with a one-line warning (and refuses fewer rows than devices) before anything compiles.
"""

from __future__ import annotations

import json
import logging

import pytest
from run_helpers import LENGTHS, run_child, write_child_spec

EIGHT_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}


def test_indivisible_token_batch_trains_on_an_8_device_mesh(make_config, tiny_data, tmp_path):
    """13 rows (208 tokens / 16) on a simulated 8-device data axis: 8 rows, and the run trains."""
    config = make_config("rows", train_steps=2, inputs={"batch_tokens": 13 * LENGTHS["targets"]},
                         eval={"period": 2}, checkpoint={"period": 2})
    res = run_child(write_child_spec(config, tiny_data, tmp_path), extra_env=EIGHT_DEVICES,
                    timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout.strip().splitlines()[-1])[0]["status"] == "finished"
    run_json = json.loads((tmp_path / "rows" / "run.json").read_text())
    assert run_json["training"]["batch_size"] == 8 and run_json["training"]["num_processes"] == 1
    assert run_json["training"]["mesh_shape"] == [-1, 1]
    warning = [line for line in res.stderr.splitlines() if "rounded down to 8 rows" in line]
    assert len(warning) == 1 and "batch_tokens=208" in warning[0] and " 13 rows" in warning[0]
    assert "data-parallel size 8" in warning[0]


def test_fewer_rows_than_the_data_axis_is_a_clear_error(make_config, tiny_data, tmp_path):
    config = make_config("few", inputs={"batch_size": 4})
    res = run_child(write_child_spec(config, tiny_data, tmp_path), extra_env=EIGHT_DEVICES)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: TrainConfig.inputs.batch_size=4"), last
    assert "4 rows per step, fewer than the data-parallel size 8" in last
    assert not (tmp_path / "few" / "checkpoints").exists()  # failed before training anything


@pytest.mark.parametrize(("divisor", "rows"), [(1, 1953), (8, 1952), (16, 1952), (64, 1920)])
def test_the_paper_scale_study_batch_resolves_on_large_data_axes(divisor, rows, tmp_path, caplog,
                                                                 monkeypatch):
    """fernandes_en_de_zh.gin: 500K tokens / 256 = 1,953 rows → a multiple of each data axis."""
    from mnmt.study import runner
    from mnmt.study.spec import expand
    from mnmt.study.stages import load_spec
    from mnmt.training.run_setup import resolve_batch_size

    spec = load_spec("fernandes_en_de_zh", None, [])
    run = expand(spec)[0]
    data = runner.StudyData(vocabulary_path="v.model", irreducible_loss={},
                            tasks={"en-de": "wmt19_en_de", "en-zh": "wmt19_en_zh"})
    # the run's mixture would need the WMT19 tasks registered; it plays no part in the batch
    monkeypatch.setattr(runner, "register_run_mixture", lambda *args: "a_mixture")
    config = runner.make_train_config(spec, run, data, tmp_path / run.run_id)
    with caplog.at_level(logging.WARNING, logger="mnmt.models.accounting"):
        assert resolve_batch_size(config, divisor) == rows
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == (rows != 1953)
    if messages:
        assert f"1953 rows per step, not divisible by the data-parallel size {divisor}" \
            in messages[0]
        assert "StudySpec.batch_tokens" in messages[0] and f"rounded down to {rows} rows" \
            in messages[0]


def test_data_parallel_size_covers_mesh_and_input_shards():
    from mnmt.training.run_setup import data_parallel_size

    assert data_parallel_size(8, 1) == 8
    assert data_parallel_size(8, 2) == 8  # two hosts, four devices each
    assert data_parallel_size(4, 6) == 12
