"""run.json / metrics.jsonl writing: atomic replace, no duplicate rows, torn lines, mismatch."""

import json

import pytest

from mnmt.training import run_files
from mnmt.training.run_files import MetricsWriter, RunMismatchError, check_compatible


def _row(step, task="en-de", metric="loss", value=1.0):
    return dict(step=step, tokens=step * 10, task=task, eval_set="validation", metric=metric,
                value=value)


def test_metrics_writer_skips_rows_already_in_the_file(tmp_path):
    w = MetricsWriter(str(tmp_path), "r1")
    assert w.write([_row(1), _row(2)]) == 2
    # A resumed run (new writer on the same dir) re-computes step 2 and adds step 3.
    w2 = MetricsWriter(str(tmp_path), "r1")
    assert w2.write([_row(2, value=9.0), _row(3)]) == 1
    rows = run_files.read_metrics(str(tmp_path))
    assert [(r["step"], r["value"]) for r in rows] == [(1, 1.0), (2, 1.0), (3, 1.0)]
    assert rows[0] == {"run_id": "r1", "step": 1, "tokens": 10, "task": "en-de",
                       "eval_set": "validation", "metric": "loss", "value": 1.0}


def test_torn_last_line_is_cut_and_rewritten(tmp_path):
    w = MetricsWriter(str(tmp_path), "r1")
    w.write([_row(1), _row(2)])
    path = tmp_path / "metrics.jsonl"
    text = path.read_text()
    path.write_text(text[: len(text) - 7])  # a SIGKILL in the middle of the second row
    assert len(run_files.read_metrics(str(tmp_path))) == 1
    w2 = MetricsWriter(str(tmp_path), "r1")
    assert w2.write([_row(2)]) == 1
    lines = path.read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]


def test_non_primary_writer_reads_but_never_writes(tmp_path):
    MetricsWriter(str(tmp_path), "r1").write([_row(1)])
    reader = MetricsWriter(str(tmp_path), "r1", enabled=False)
    assert reader.has(1, "en-de", "validation", "loss")
    assert reader.write([_row(5)]) == 0
    assert len(run_files.read_metrics(str(tmp_path))) == 1


def test_nonfinite_values_are_written_as_null(tmp_path):
    MetricsWriter(str(tmp_path), "r1").write([_row(1, value=float("nan"))])
    assert run_files.read_metrics(str(tmp_path))[0]["value"] is None


def test_corrupt_metrics_line_names_file_and_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps(
        {"run_id": "r", **_row(1)}) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl: line 2"):
        MetricsWriter(str(tmp_path), "r")


def test_run_json_atomic_roundtrip(tmp_path):
    run_files.write_run_json(str(tmp_path), {"a": 1, "t": (1, 2)})
    assert run_files.read_run_json(str(tmp_path)) == {"a": 1, "t": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temp file left
    assert run_files.read_run_json(str(tmp_path / "missing")) is None


def _run(size="mini-2", weights=None, sha="abc"):
    return {"model": {"size": size, "config": {"emb_dim": 64}, "vocab_size": 512},
            "mixture": {"name": "m", "weights": weights or {"en-de": 0.5, "en-zh": 0.5},
                        "caps": {"en-de": None}},
            "training": {"feature_lengths": {"inputs": 32, "targets": 32}, "batch_size": 8,
                         "seed": 0},
            "vocabulary": {"sha256": sha}}


def test_check_compatible_names_every_difference():
    check_compatible(_run(), _run(), "d/run.json")
    with pytest.raises(RunMismatchError) as e:
        check_compatible(_run(), _run(size="mini-3", sha="def"), "d/run.json")
    msg = str(e.value)
    assert "model.size" in msg and "mini-2" in msg and "mini-3" in msg
    assert "vocabulary.sha256" in msg
    assert "mixture.weights" not in msg
    with pytest.raises(RunMismatchError, match="mixture.weights"):
        check_compatible(_run(), _run(weights={"en-de": 0.3, "en-zh": 0.7}), "d/run.json")


def test_file_sha256_and_versions(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abc")
    assert run_files.file_sha256(str(p)) == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    versions = run_files.package_versions()
    assert "jax" in versions and "optax" in versions
