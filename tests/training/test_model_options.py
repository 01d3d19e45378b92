"""`TrainConfig.activation_dtype` and `TrainConfig.remat_policy`: validated with one-line errors,
applied to the zoo's model config, recorded in run.json, and trained end to end."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from mnmt.training.config import (
    ACTIVATION_DTYPES,
    REMAT_POLICIES,
    EvalConfig,
    InputConfig,
    TrainConfig,
)
from mnmt.training.run_setup import build_run_json, build_setup, model_config_for


def _config(tmp_path, **overrides) -> TrainConfig:
    """A config that needs no data: any existing file stands in for the vocabulary."""
    base = TrainConfig(
        model_dir=str(tmp_path / "run"), model_size="mini-1", vocabulary_path=__file__,
        train_steps=4,
        inputs=InputConfig(mixture_or_task_name="unused", feature_lengths={"inputs": 8,
                                                                          "targets": 8},
                           batch_size=2),
        eval=EvalConfig(tasks={"en-de": "unused"}), mixture_weights={"en-de": 1.0})
    return base.updated(**overrides)


@pytest.mark.parametrize("field,value,allowed", [
    ("activation_dtype", "float16", ACTIVATION_DTYPES),
    ("activation_dtype", "bf16", ACTIVATION_DTYPES),
    ("remat_policy", "sometimes", REMAT_POLICIES),
])
def test_invalid_model_option_is_a_one_line_error(tmp_path, field, value, allowed):
    with pytest.raises(ValueError) as err:
        build_setup(_config(tmp_path, **{field: value}))
    message = str(err.value)
    assert "\n" not in message
    assert message == f"invalid TrainConfig: {field} must be one of {allowed}, got {value!r}"
    assert not os.path.exists(tmp_path / "run"), "nothing may be written for a bad config"


def test_model_options_reach_the_model_config_and_run_json(tmp_path):
    config = _config(tmp_path, activation_dtype="bfloat16", remat_policy="full",
                     dropout_rate=0.1)
    model_config = model_config_for(config, 512)
    assert (model_config.dtype, model_config.remat_policy, model_config.dropout_rate,
            model_config.vocab_size, model_config.name) == ("bfloat16", "full", 0.1, 512, "mini-1")
    run_json = build_run_json(config, "run", model_config, 512, 2)
    assert run_json["model"]["config"]["dtype"] == "bfloat16"
    assert run_json["training"]["activation_dtype"] == "bfloat16"
    assert run_json["training"]["remat_policy"] == "full"
    # remat changes memory, not values: not part of the model's identity (a run may resume with
    # another policy); the activation dtype is (model.config is compared on resume).
    assert "remat_policy" not in run_json["model"]["config"]

    default = model_config_for(_config(tmp_path), 512)
    assert (default.dtype, default.remat_policy) == ("float32", "none")


def test_bfloat16_remat_run_trains_end_to_end(make_config):
    """mini-1 for 2 steps through the trainer with both options: finite losses, run.json."""
    from mnmt.training.run_files import read_metrics
    from mnmt.training.trainer import train

    config = make_config("bf16_remat", activation_dtype="bfloat16", remat_policy="minimal",
                         train_steps=2, log_every=1, eval={"period": 2},
                         checkpoint={"period": 2})
    summary = train(config, progress=lambda e: None)
    assert summary.status == "finished" and summary.final_step == 2
    with open(os.path.join(config.model_dir, "run.json")) as f:
        run_json = json.load(f)
    assert run_json["model"]["config"]["dtype"] == "bfloat16"
    assert run_json["training"]["remat_policy"] == "minimal"
    losses = [r["value"] for r in read_metrics(config.model_dir) if r["metric"] == "loss"]
    assert losses and np.all(np.isfinite(losses))
