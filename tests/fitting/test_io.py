"""fitting.data.io (one rule for remote paths) and the one metrics.jsonl reader of fitting.data.rundirs."""

import json
import os

import pytest

from fitting.core.base import FitError
from fitting.data import io
from fitting.data.rundirs import (
    final_losses_from_rows,
    parse_metrics_jsonl,
    read_metrics_jsonl,
)


def _row(step=10, task="en-de", eval_set="validation", metric="loss", value=1.5, **kw):
    return {"run_id": "r", "step": step, "tokens": step * 100, "task": task,
            "eval_set": eval_set, "metric": metric, "value": value, **kw}


def test_one_remote_rule():
    for url in ("gs://b/x", "s3://b/x", "hdfs://h/x", "file:///tmp/x"):
        assert io.is_remote(url)
    for local in ("runs/a", "/tmp/a", "a:b/c"):
        assert not io.is_remote(local)
    assert io.join("gs://b/", "/runs/", "run.json") == "gs://b/runs/run.json"
    assert io.join("runs", "a", "run.json") == os.path.join("runs", "a", "run.json")


def test_local_file_operations(tmp_path):
    d = io.join(str(tmp_path), "a", "b")
    io.makedirs(d)
    io.makedirs(d)  # exists: no error
    assert io.isdir(d) and io.exists(d)
    with io.open_file(io.join(d, "x.txt"), "w") as f:
        f.write("é\n")
    with io.open_file(io.join(d, "y.txt"), "w") as f:
        f.write("new\n")
    assert io.listdir(d) == ["x.txt", "y.txt"]
    assert io.glob(io.join(d, "*.txt")) == [io.join(d, "x.txt"), io.join(d, "y.txt")]
    with pytest.raises(FileExistsError):
        io.rename(io.join(d, "y.txt"), io.join(d, "x.txt"), overwrite=False)
    io.rename(io.join(d, "y.txt"), io.join(d, "x.txt"))  # atomic replace
    with io.open_file(io.join(d, "x.txt")) as f:
        assert f.read() == "new\n"
    assert [files for _, _, files in io.walk(str(tmp_path))][-1] == ["x.txt"]


def test_metrics_reader_checks_fields_and_names_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [_row(), _row(step=20, value=None)]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + "\n")
    rows = read_metrics_jsonl(path)
    assert [r["step"] for r in rows] == [10, 20] and rows[1]["value"] is None
    bad = {k: v for k, v in _row(step=30).items() if k != "tokens"}
    with open(path, "a") as f:
        f.write(json.dumps(bad) + "\n")
    with pytest.raises(FitError, match=rf"{path}: line 4: missing field 'tokens'"):
        read_metrics_jsonl(path)
    with pytest.raises(FitError, match="line 1: field 'step' should be int, got '1'"):
        parse_metrics_jsonl(json.dumps(_row(step="1")) + "\n")
    with pytest.raises(FitError, match="line 1: field 'value' should be int/float, got True"):
        parse_metrics_jsonl(json.dumps(_row(value=True)) + "\n")
    with pytest.raises(FitError, match="no such file"):
        read_metrics_jsonl(tmp_path / "nope.jsonl")


def test_metrics_reader_torn_last_line_and_checks():
    text = json.dumps(_row()) + "\n" + json.dumps(_row(step=20))[:-5]
    with pytest.raises(FitError, match="line 2: invalid JSON"):
        parse_metrics_jsonl(text)
    assert len(parse_metrics_jsonl(text, ignore_torn_last_line=True)) == 1
    # a complete final line without "\n" is still torn by the writer's rule
    assert len(parse_metrics_jsonl(json.dumps(_row()), ignore_torn_last_line=True)) == 0
    assert len(parse_metrics_jsonl(json.dumps(_row()))) == 1
    dup = json.dumps(_row()) + "\n" + json.dumps(_row(value=2.0)) + "\n"
    assert len(parse_metrics_jsonl(dup)) == 2
    with pytest.raises(FitError, match=r"line 1: duplicate \(step, task, eval_set, metric\)"):
        parse_metrics_jsonl(dup, unique_keys=True)
    with pytest.raises(FitError, match="line 1: run_id 'r' differs from run.json's 'other'"):
        parse_metrics_jsonl(dup, run_id="other")


def test_final_losses_from_rows():
    rows = [_row(step=10, value=3.0), _row(step=20, value=2.0),
            _row(step=20, task="en-zh", value=None), _row(step=30, metric="bleu", value=9.0),
            _row(step=40, eval_set="test", value=1.0)]
    assert final_losses_from_rows(rows, "validation") == {"en-de": 2.0}
    assert final_losses_from_rows(rows, "test") == {"en-de": 1.0}
    assert final_losses_from_rows(rows, "validation", metric="bleu") == {"en-de": 9.0}
    assert final_losses_from_rows(rows, "nope") == {}


def test_remote_paths_go_through_gfile():
    """tensorflow's in-memory ram:// file system stands in for gs:// (same code path)."""
    pytest.importorskip("tensorflow")
    root = "ram://fitting-io-test/runs"
    d = io.join(root, "a")
    io.makedirs(d)
    assert io.isdir(d) and io.exists(root) and not io.exists(io.join(d, "nope"))
    for name, text in (("x.txt", "old\n"), ("y.txt", "new\n")):
        with io.open_file(io.join(d, name), "w") as f:
            f.write(text)
    assert io.listdir(d) == ["x.txt", "y.txt"] and io.listdir(root) == ["a"]
    assert io.glob(io.join(d, "*.txt")) == [io.join(d, "x.txt"), io.join(d, "y.txt")]
    with pytest.raises(FileExistsError):
        io.rename(io.join(d, "y.txt"), io.join(d, "x.txt"), overwrite=False)
    io.rename(io.join(d, "y.txt"), io.join(d, "x.txt"))
    with io.open_file(io.join(d, "x.txt")) as f:
        assert f.read() == "new\n"
    assert [(p, files) for p, _, files in io.walk(root)][-1] == (d, ["x.txt"])
    with io.open_file(io.join(d, "metrics.jsonl"), "w") as f:
        f.write(json.dumps(_row()) + "\n" + json.dumps(_row(step=20))[:9])
    assert len(read_metrics_jsonl(io.join(d, "metrics.jsonl"), ignore_torn_last_line=True)) == 1
