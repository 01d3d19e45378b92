"""Tracking beside TensorBoard (mnmt.training.tracking): W&B runs written offline and read back
from their transaction logs, the missing-wandb error, and `--profile_steps` traces."""

from __future__ import annotations

import glob
import json
import os
import signal
import struct
import sys
import time

import gin
import pytest

from mnmt.training import run_files, tracking
from mnmt.training import train as train_cli
from mnmt.training.config import TrackingConfig

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """W&B kept off the network and out of the home directory: offline, silent, no error
    reports, its config and cache under tmp_path. Skipped, saying why, without wandb."""
    pytest.importorskip("wandb", reason='wandb is not installed (pip install '
                                        '"mnmt-scaling[tracking]")')
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true",
                        "WANDB_ERROR_REPORTING": "false", "WANDB_DISABLE_GIT": "true",
                        "WANDB_DISABLE_CODE": "true", "WANDB_CONFIG_DIR": tmp_path / "wb_config",
                        "WANDB_CACHE_DIR": tmp_path / "wb_cache",
                        "WANDB_DATA_DIR": tmp_path / "wb_data",
                        "WANDB_DIR": tmp_path / "wb_default"}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return tmp_path / "wandb_files"


def transaction_records(path: str):
    """The protobuf records of an offline run's `.wandb` transaction log: a 7-byte header
    (":W&B", magic, version), then LevelDB-log chunks (crc32, length, type) in 32 KiB blocks."""
    from wandb.proto import wandb_internal_pb2

    data = open(path, "rb").read()
    assert data[:4] == b":W&B", path
    block, pos, pending = 32768, 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:  # zero padding up to the next block
            pos += block - pos % block
            continue
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def offline_runs(wandb_dir) -> dict[str, dict]:
    """W&B run id → {"history": {step: {key: value}}, "exit_codes": [...], "names": {...},
    "config": {...}} over every offline run directory (one per session) under `wandb_dir`."""
    runs: dict[str, dict] = {}
    for path in sorted(glob.glob(os.path.join(str(wandb_dir), "wandb", "offline-run-*",
                                              "*.wandb"))):
        run = None
        for record in transaction_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run = runs.setdefault(record.run.run_id, {"history": {}, "exit_codes": [],
                                                          "names": set(), "config": {}})
                run["names"].add(record.run.display_name)
                run["config"].update({c.key: json.loads(c.value_json)
                                      for c in record.run.config.update})
            elif kind == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                         for i in record.history.item}
                step = items.pop("_step")
                for key, value in items.items():
                    if not key.startswith("_"):
                        assert run["history"].setdefault(step, {}).setdefault(key, value) == value
            elif kind == "exit":
                run["exit_codes"].append(record.exit.exit_code)
    return runs


def finished_runs(wandb_dir, ids: list[str], exits: int = 1,
                  timeout_s: float = 30.0) -> dict[str, dict]:
    """`offline_runs` once every run of `ids` has `exits` exit records (W&B's service writes the
    transaction logs in the background; on a loaded machine a finished run's file can lag)."""
    deadline = time.monotonic() + timeout_s
    while True:
        runs = offline_runs(wandb_dir)
        if all(len(runs.get(i, {}).get("exit_codes", [])) >= exits for i in ids) \
                or time.monotonic() > deadline:
            return runs
        time.sleep(0.5)


def expected_history(model_dir) -> dict[int, dict[str, float]]:
    """The W&B history a run should hold: its metrics.jsonl rows under TensorBoard's tags."""
    expected: dict[int, dict[str, float]] = {}
    for row in run_files.read_metrics(model_dir):
        if row["metric"] == "train_loss":  # all, and each pair
            key = "train/loss" if row["task"] == "all" else f"train/{row['task']}/loss"
        elif row["metric"] == "learning_rate":
            key = "train/learning_rate"
        else:
            key = f"eval/{row['eval_set']}/{row['task']}/{row['metric']}"
        expected.setdefault(row["step"], {})[key] = row["value"]
    return expected


# One run in the fast suite; a group of two (one W&B run per member) under -m slow (≈ 45 s of
# CPU more: the grouped program compiles on its own).
@pytest.mark.parametrize("members", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_wandb_logs_the_metrics_rows_and_a_resumed_run_continues_it(make_config, offline_wandb,
                                                                    members):
    """Runs preempted at step 2 and resumed to step 4: each run has one W&B run (its id kept in
    the run directory), whose history holds exactly the train-loss, rate and eval-loss values of
    its metrics.jsonl at their steps, and the rates; exit codes 143, then 0."""
    from mnmt.training.trainer import train_group

    track = TrackingConfig(wandb_project="mnmt-test", wandb_mode="offline",
                           wandb_dir=str(offline_wandb), wandb_tags=("tiny",), wandb_group="g")
    configs = [make_config(name, run_id=name, seed=seed, train_steps=4, eval={"period": 2},
                           checkpoint={"period": 2}, tracking=track)
               for name, seed in (("wb_a", 0), ("wb_b", 1))[:members]]

    def stop_at_2(event):
        if event.kind == "train" and event.step == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # the preemption guard checkpoints and stops

    first = train_group(configs, progress=stop_at_2)
    assert [s.status for s in first] == ["preempted"] * members
    ids = [json.load(open(os.path.join(c.model_dir, tracking.WANDB_RUN_FILE)))["wandb_run_id"]
           for c in configs]
    second = train_group(configs, progress=lambda e: None)
    assert [s.status for s in second] == ["finished"] * members
    assert ids == [json.load(open(os.path.join(c.model_dir, tracking.WANDB_RUN_FILE)))
                   ["wandb_run_id"] for c in configs]

    runs = finished_runs(offline_wandb, ids, exits=2)
    assert sorted(runs) == sorted(set(ids))
    for config, wandb_id in zip(configs, ids, strict=True):
        run = runs[wandb_id]
        assert run["exit_codes"] == [143, 0]
        assert run["names"] == {config.run_id}
        assert run["config"]["seed"] == config.seed and run["config"]["train_steps"] == 4
        expected = expected_history(config.model_dir)
        assert sorted(expected) == [2, 4] and sorted(run["history"]) == [2, 4]
        for step, values in expected.items():
            for key, value in values.items():
                assert run["history"][step][key] == pytest.approx(value, rel=1e-6), (step, key)
            assert {"train/tokens_per_s", "train/grad_norm"} <= set(run["history"][step])


def test_runs_of_one_process_have_one_wandb_run_each(make_config, offline_wandb):
    """What a group does, without training: two W&B runs open at once in one process, each
    logging its own values under its own id (then marked finished and diverged)."""
    track = TrackingConfig(wandb_project="mnmt-test", wandb_mode="offline",
                           wandb_dir=str(offline_wandb))
    configs = [make_config(name, tracking=track) for name in ("m_a", "m_b")]
    opened = [tracking.start_wandb(c, c.run_id or os.path.basename(c.model_dir))
              for c in configs]
    for step in (1, 2):
        for i, run in enumerate(opened):
            run.log(step, {"train/loss": 10.0 * i + step, "train/mfu": float("nan")})
    opened[0].finish("finished")
    opened[1].finish("diverged")
    ids = [json.load(open(os.path.join(c.model_dir, tracking.WANDB_RUN_FILE)))["wandb_run_id"]
           for c in configs]
    runs = finished_runs(offline_wandb, ids)
    assert sorted(runs) == sorted(ids) and ids[0] != ids[1]
    for i, wandb_id in enumerate(ids):
        assert runs[wandb_id]["history"] == {1: {"train/loss": 10.0 * i + 1},
                                             2: {"train/loss": 10.0 * i + 2}}
        assert runs[wandb_id]["names"] == {f"m_{'ab'[i]}"}
    assert [runs[i]["exit_codes"] for i in ids] == [[0], [3]]


def test_wandb_on_without_wandb_is_a_clear_error(make_config, monkeypatch):
    from mnmt.training.trainer import train

    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    config = make_config("no_wandb", tracking=TrackingConfig(wandb_project="p"))
    with pytest.raises(tracking.TrackingError) as e:
        train(config)
    text = str(e.value)
    assert "TrackingConfig.wandb_project" in text and 'pip install "mnmt-scaling[tracking]"' in text
    assert not os.path.exists(config.model_dir)  # refused before anything was written


def test_wandb_online_without_a_login_is_a_clear_error(make_config, offline_wandb, tmp_path,
                                                       monkeypatch):
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc key either: W&B refuses at once
    config = make_config("online", tracking=TrackingConfig(wandb_project="p",
                                                           wandb_dir=str(offline_wandb)))
    with pytest.raises(tracking.TrackingError) as e:
        tracking.start_wandb(config, "online")
    assert "project 'p'" in str(e.value) and "wandb login" in str(e.value)
    assert "TrackingConfig.wandb_mode = 'offline'" in str(e.value)


def test_tracking_settings_are_checked(make_config):
    for tracking_config, words in [
            (TrackingConfig(wandb_mode="onlin"), "TrackingConfig.wandb_mode"),
            (TrackingConfig(profile_steps=(3, 2)), "1 ≤ A ≤ B ≤ train_steps (12)"),
            (TrackingConfig(profile_steps=(4, 13)), "got (4, 13)"),
            (TrackingConfig(profile_steps=(0, 1)), "TrackingConfig.profile_steps"),
            (TrackingConfig(profile_steps=(1, 2, 3)), "two step numbers")]:
        with pytest.raises(tracking.TrackingError, match="TrackingConfig") as e:
            tracking.check_tracking(make_config(tracking=tracking_config))
        assert words in str(e.value)
    tracking.check_tracking(make_config(tracking=TrackingConfig(profile_steps=(12, 12))))
    assert tracking.EXIT_CODES == {"finished": 0, "stopped": 0,  # stopped early: a success
                                   "preempted": train_cli.EXIT_PREEMPTED,
                                   "diverged": train_cli.EXIT_DIVERGED}


def test_tracking_config_from_gin_and_dict(tmp_path):
    gin.clear_config()
    try:
        train_cli.parse_gin(
            [os.path.join(REPO, "t5x_configs/runs/train.gin")],
            [f"MODEL_DIR = '{tmp_path}/m'", "MIXTURE_OR_TASK_NAME = 'mix'",
             "MODEL_SIZE = 'mini-1'", "VOCABULARY_PATH = 'v.model'", "TRAIN_STEPS = 7",
             "EVAL_TASKS = {'en-de': 't'}", "TrackingConfig.wandb_project = 'proj'",
             "TrackingConfig.profile_steps = (2, 3)", "TrackingConfig.wandb_tags = ['a']"])
        from mnmt.training.config import TrainConfig

        config = TrainConfig()
    finally:
        gin.clear_config()
    assert config.tracking.wandb_project == "proj" and config.tracking.profile_steps == (2, 3)
    back = TrainConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert back.tracking == TrackingConfig(wandb_project="proj", profile_steps=(2, 3),
                                           wandb_tags=("a",))
    assert TrainConfig.from_dict({**config.to_dict(), "tracking": {}}).tracking == TrackingConfig()


def _cli_args(model_dir, tiny_data, *extra):
    return ["--gin_file=runs/cpu_tiny.gin", f"--gin.MODEL_DIR='{model_dir}'",
            "--gin.MODEL_SIZE='mini-1'", "--gin.TRAIN_STEPS=4", "--gin.EVAL_PERIOD=4",
            "--gin.BATCH_SIZE=8", "--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 16}",
            f"--gin.VOCABULARY_PATH='{tiny_data['vocab']}'", "--gin.DECODE_AT_END=False",
            "--gin.EvalConfig.batch_size=16", "--gin.TrainConfig.tensorboard=False",
            "--gin.setup_tasks.vocab_size=512", "--quiet", *extra]


def test_profile_steps_flag_writes_a_trace_for_tensorboard(tiny_data, tmp_path, capsys):
    gin.clear_config()
    model_dir = tmp_path / "profiled"
    try:
        rc = train_cli.main(_cli_args(model_dir, tiny_data, "--profile_steps", "2:3"))
    finally:
        gin.clear_config()
    assert rc == 0, capsys.readouterr().err[-2000:]
    traces = glob.glob(str(model_dir / "events" / "plugins" / "profile" / "*" / "*.xplane.pb"))
    assert len(traces) == 1 and os.path.getsize(traces[0]) > 0


@pytest.mark.parametrize("text", ["3", "a:b", "3:2", "0:1", "2:"])
def test_bad_profile_steps_text_names_the_flag(text, capsys):
    with pytest.raises(SystemExit):
        train_cli.parse_args(["--gin_file=runs/cpu_tiny.gin", f"--profile_steps={text}"])
    err = capsys.readouterr().err
    assert "argument --profile_steps" in err and "A:B" in err, err
    assert tracking.parse_profile_steps(" 10:12 ") == (10, 12)


def test_profile_steps_past_the_last_step_is_one_line(tiny_data, tmp_path, capsys):
    gin.clear_config()
    try:
        rc = train_cli.main(_cli_args(tmp_path / "late", tiny_data, "--profile_steps=2:9"))
    finally:
        gin.clear_config()
    err = capsys.readouterr().err
    assert rc == 2 and "--profile_steps 2:9" in err and "TRAIN_STEPS = 4" in err, err
    assert not (tmp_path / "late" / "run.json").exists()
