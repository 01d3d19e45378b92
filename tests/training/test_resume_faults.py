"""Resuming a run whose files were damaged (mini-1 on the tiny synthetic tasks, in process).

- An unreadable latest checkpoint: the run resumes from the previous one, says so, and ends with
  exactly the rows of an uninterrupted run, none twice.
- A run.json or metrics.jsonl line that is not valid JSON: a one-line error naming the file and
  the line, and nothing in the run directory is written.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
from run_helpers import rows_by_key, small_run_config

from mnmt.training import run_files
from mnmt.training.run_files import RunFileError


@pytest.fixture(scope="module")
def reference(tiny_data, tmp_path_factory):
    """The run uninterrupted: its metrics rows."""
    from mnmt.training.trainer import train

    config = small_run_config(tiny_data, tmp_path_factory.mktemp("reference") / "run", "faults")
    assert train(config, progress=lambda e: None).status == "finished"
    return run_files.read_metrics(config.model_dir)


@pytest.fixture(scope="module")
def preempted(tiny_data, tmp_path_factory):
    """The same run stopped by SIGTERM at step 6: checkpoints 4 and 6, rows up to step 6."""
    from mnmt.training.trainer import train

    config = small_run_config(tiny_data, tmp_path_factory.mktemp("preempted") / "run", "faults")

    def progress(event):
        if event.kind == "train" and event.step >= 6:
            os.kill(os.getpid(), signal.SIGTERM)  # the trainer's guard checkpoints and stops

    summary = train(config, progress=progress)
    assert summary.status == "preempted" and summary.final_step == 6
    assert sorted(os.listdir(os.path.join(config.model_dir, "checkpoints"))) == [
        "step_4", "step_6"]
    return config


@pytest.fixture
def damaged(preempted, tmp_path):
    """A copy of the preempted run directory to damage, and its config."""
    model_dir = tmp_path / "run"
    shutil.copytree(preempted.model_dir, model_dir)
    return preempted.updated(model_dir=str(model_dir)), model_dir


def _snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_unreadable_latest_checkpoint_resumes_from_the_previous_one_with_exact_rows(
        reference, damaged):
    from mnmt.training.trainer import train

    config, model_dir = damaged
    step6 = model_dir / "checkpoints" / "step_6"
    metadata = step6 / "state" / "_METADATA"
    metadata.write_bytes(metadata.read_bytes()[: metadata.stat().st_size // 2])  # a torn copy
    rows_before = rows_by_key(run_files.read_metrics(str(model_dir)))
    assert max(step for step, *_ in rows_before) == 6  # rows of steps 5-6 are already there

    events = []
    summary = train(config, progress=events.append)
    assert summary.status == "finished" and summary.final_step == 12
    warning, = [e.message for e in events if "cannot be restored" in (e.message or "")]
    for part in ("step 6", str(step6), "step 4", str(model_dir / "checkpoints" / "step_4")):
        assert part in warning, (part, warning)
    assert any(e.message == "resumed from checkpoint at step 4" for e in events)
    assert [e.step for e in events if e.kind == "train"][0] == 6  # trained again from step 4

    rows = run_files.read_metrics(str(model_dir))
    keys = [(r["step"], r["task"], r["eval_set"], r["metric"]) for r in rows]
    assert len(keys) == len(set(keys)), "rows of steps 5-6 written twice"
    want, got = rows_by_key(reference), rows_by_key(rows)
    assert {(6, "en-de"), (6, "en-zh")} <= {k[:2] for k in want if k[3] == "train_loss"}
    assert sorted(got) == sorted(want)  # the per-pair train_loss rows too: none lost, none twice
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    assert {(r["step"], r["metric"]): r["tokens"] for r in rows} == {
        (r["step"], r["metric"]): r["tokens"] for r in reference}
    # The unreadable checkpoint was set aside; step 6 was not saved again (period 4).
    assert sorted(os.listdir(model_dir / "checkpoints")) == ["step_12", "step_8"]
    assert os.listdir(model_dir / "checkpoints.unreadable") == ["step_6"]
    assert run_files.read_run_json(str(model_dir))["status"] == "finished"


def _garbled_quote(text: str) -> tuple[str, int]:
    line = text[: text.index('"status"')].count("\n") + 1
    return text.replace('"status"', '"status', 1), line


def _truncated(text: str) -> tuple[str, int]:
    cut = text[: len(text) // 2]
    return cut, cut.count("\n") + 1


def _emptied(text: str) -> tuple[str, int]:  # a crash on a file system without data journalling
    return "", 1


@pytest.mark.parametrize("damage", [_garbled_quote, _truncated, _emptied])
def test_garbled_run_json_is_a_one_line_error_and_nothing_is_written(damaged, damage):
    from mnmt.training.trainer import train

    config, model_dir = damaged
    path = model_dir / "run.json"
    text, line = damage(path.read_text())
    assert line > 1 or damage is _emptied  # run.json is indented: the error is not on line 1
    path.write_text(text)
    before = _snapshot(model_dir)
    with pytest.raises(RunFileError) as err:
        train(config, progress=lambda e: None)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: line {line}: not valid JSON"), (
        message)
    assert _snapshot(model_dir) == before


@pytest.mark.parametrize("garbage, what", [
    (b'{"run_id": "faults", "step": 2, "tok\n', "invalid JSON"),
    (b"\x00\x00\x00\x00\n", "invalid JSON"),  # zeros where a block was lost
    (b'{"run_id": "faults", "step": 2, "task": "\xff\xfe"}\n', "not UTF-8"),
])
def test_garbled_metrics_line_is_a_one_line_error_and_nothing_is_written(damaged, garbage, what):
    from mnmt.training.trainer import train

    config, model_dir = damaged
    path = model_dir / "metrics.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2] + [garbage] + lines[3:]))  # line 3 garbled
    before = _snapshot(model_dir)
    with pytest.raises(RunFileError) as err:
        train(config, progress=lambda e: None)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: line 3: "), message
    assert what in message
    assert _snapshot(model_dir) == before  # run.json included: it used to be rewritten first


def test_torn_last_metrics_line_is_still_repaired_silently(damaged):
    """A SIGKILL mid-append leaves a final line without its newline: not an error, dropped."""
    config, model_dir = damaged
    path = model_dir / "metrics.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"run_id": "faults", "st')
    writer = run_files.MetricsWriter(str(model_dir), "faults")
    assert path.read_bytes() == whole and writer.has(6, "all", "train", "train_loss")
