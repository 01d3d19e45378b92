"""mnmt-train (gin, T5X flags) and mnmt-export (run directories → tidy table)."""

from __future__ import annotations

import os
import re

import gin
import pandas as pd
import pytest

from mnmt import export
from mnmt.training import run_files
from mnmt.training import train as train_cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _clear_gin():
    gin.clear_config()
    yield
    gin.clear_config()


def test_gin_files_parse_with_t5x_macros(tiny_data, tmp_path):
    train_cli.parse_gin(
        [os.path.join(REPO, "t5x_configs/runs/train.gin")],
        [f"MODEL_DIR = '{tmp_path}/m'", "MIXTURE_OR_TASK_NAME = 'mix'", "MODEL_SIZE = 'mini-1'",
         f"VOCABULARY_PATH = '{tiny_data['vocab']}'", "TRAIN_STEPS = 7",
         "EVAL_TASKS = {'en-de': 't'}", "TASK_FEATURE_LENGTHS = {'inputs': 8, 'targets': 12}",
         "BATCH_TOKENS = 120", "OptimizerConfig.max_grad_norm = 1.0"])
    from mnmt.training.config import TrainConfig

    config = TrainConfig()
    assert config.model_dir == f"{tmp_path}/m" and config.train_steps == 7
    assert config.inputs.feature_lengths == {"inputs": 8, "targets": 12}
    assert config.inputs.batch_tokens == 120 and config.optimizer.max_grad_norm == 1.0
    assert config.warmup_steps == 10000 and config.z_loss == 1e-4  # T5X-like defaults


def test_mnmt_train_cli_end_to_end_then_export(tiny_data, tmp_path, capsys):
    model_dir = tmp_path / "cli_run"
    rc = train_cli.main([
        "--gin_file=runs/cpu_tiny.gin", f"--gin.MODEL_DIR='{model_dir}'",
        "--gin.MODEL_SIZE='mini-1'", "--gin.TRAIN_STEPS=4", "--gin.EVAL_PERIOD=4",
        "--gin.BATCH_SIZE=8", "--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 16}",
        f"--gin.VOCABULARY_PATH='{tiny_data['vocab']}'", "--gin.DECODE_AT_END=False",
        "--gin.EvalConfig.batch_size=16", "--gin.TrainConfig.tensorboard=False",
        "--gin.setup_tasks.vocab_size=512", "--gin.TrainConfig.log_every=2"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "finished at step 4" in err
    # progress lines (step, loss, steps/s, tokens/s, MFU, ETA) on the terminal and in the log
    pattern = (r"\[cli_run\] step 4/4 loss \d+\.\d{4} lr \S+ \d+\.\d\d steps/s [\d,]+ tok/s "
               r"MFU \d+\.\d% ETA 0:00")
    assert re.search(pattern, err), err[-2000:]
    log_text = (model_dir / "train.log").read_text()
    assert re.search(pattern, log_text), log_text[-2000:]
    assert "step 2/4 loss" in log_text and "eval en-de=" in log_text
    run = run_files.read_run_json(str(model_dir))
    assert run["status"] == "finished" and "TRAIN_STEPS = 4" in run["gin_config"]
    assert set(run["mixture"]["tasks"]) == {"en-de", "en-zh"}

    out = tmp_path / "table.csv"
    assert export.main([str(tmp_path), "--out", str(out)]) == 0  # finds run dirs below
    df = pd.read_csv(out)
    for col in ("run_id", "study", "family", "size", "n", "n_enc", "n_dec", "pair", "weight",
                "data_size", "eval_set", "metric", "step", "tokens", "value", "final"):
        assert col in df.columns
    losses = df[(df.metric == "loss") & df.final]
    assert sorted(losses.pair) == ["en-de", "en-zh"]
    assert (losses.weight == 0.5).all() and (losses.n == run["model"]["params"]["non_embedding"]).all()


def test_cli_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        train_cli.main([])
    assert "--gin_file" in capsys.readouterr().err
    rc = train_cli.main(["--gin_file=runs/train.gin", f"--gin.MODEL_DIR='{tmp_path}'",
                         "--gin.MIXTURE_OR_TASK_NAME='m'", "--gin.MODEL_SIZE='mini-1'",
                         "--gin.VOCABULARY_PATH='/nonexistent.model'", "--gin.TRAIN_STEPS=1",
                         "--gin.EVAL_TASKS={'en-de': 't'}"])
    assert rc == 2
    assert "/nonexistent.model" in capsys.readouterr().err


def test_a_missing_gin_file_is_one_line_naming_it(tmp_path, capsys):
    rc = train_cli.main([f"--gin_file={tmp_path}/no_such_run.gin"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert err.startswith("mnmt-train: error: ") and "no_such_run.gin" in err
    assert len(err.strip().splitlines()) == 1


def test_includes_found_on_a_later_search_path_log_no_errors(tmp_path, caplog):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "base.gin").write_text("TRAIN_STEPS = 11\n")
    (tmp_path / "top.gin").write_text("include 'base.gin'\n")
    with caplog.at_level("INFO"):
        train_cli.parse_gin([str(tmp_path / "top.gin")], [], str(tmp_path / "lib"))
    assert gin.query_parameter("%TRAIN_STEPS") == 11
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    (tmp_path / "broken.gin").write_text("include 'nowhere.gin'\n")
    with pytest.raises(FileNotFoundError, match="nowhere.gin"):
        train_cli.parse_gin([str(tmp_path / "broken.gin")], [])


def test_export_rejects_paths_without_runs(tmp_path, capsys):
    assert export.main([str(tmp_path), "--out", str(tmp_path / "t.csv")]) == 2
    assert "no run directories" in capsys.readouterr().err


def test_diverged_run_exits_3_with_the_message(tiny_data, tmp_path, capsys):
    model_dir = tmp_path / "nan_run"
    rc = train_cli.main([
        "--gin_file=runs/cpu_tiny.gin", f"--gin.MODEL_DIR='{model_dir}'",
        "--gin.MODEL_SIZE='mini-1'", "--gin.TRAIN_STEPS=3", "--gin.BATCH_SIZE=8",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 16}",
        f"--gin.VOCABULARY_PATH='{tiny_data['vocab']}'", "--gin.DECODE_AT_END=False",
        "--gin.LEARNING_RATE=1e30", "--gin.WARMUP_STEPS=1", "--gin.CHECKPOINT_PERIOD=1",
        "--gin.TrainConfig.warmup='constant'", "--gin.TrainConfig.tensorboard=False",
        "--gin.OptimizerConfig.clipping_threshold=None",
        "--gin.OptimizerConfig.multiply_by_parameter_scale=False",
        "--gin.setup_tasks.vocab_size=512", "--quiet"])
    err = capsys.readouterr().err
    assert rc == train_cli.EXIT_DIVERGED == 3, err[-2000:]
    assert "diverged at step 2" in err and "non-finite training loss" in err
    assert "last good checkpoint is step 1" in err
    assert run_files.read_run_json(str(model_dir))["status"] == "diverged"
