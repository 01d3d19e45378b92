"""Run directories at URLs (`gs://…`): every read and write goes through `tf.io.gfile`.

There is no GCS bucket on this machine, so `tf.io.gfile` is replaced by a stand-in that maps
`gs://bucket/…` onto a local directory and refuses anything else. A code path that used `open`
or `os.*` on a `gs://` path instead of `tf.io.gfile` would not find the files and fail here.
"""

from __future__ import annotations

import glob as _glob
import os

import pandas as pd
import pytest

from mnmt import export
from mnmt.training import run_files


class _FakeGfile:
    """The part of `tf.io.gfile` that run_files, mnmt-export and fitting.data.tables use."""

    def __init__(self, root: str):
        self.root = root
        self.calls: list[str] = []

    def _local(self, path: str) -> str:
        path = os.fspath(path)
        if not path.startswith("gs://"):
            raise AssertionError(f"tf.io.gfile called with a non-gs:// path {path!r}")
        return os.path.join(self.root, path[len("gs://"):])

    def _url(self, local: str) -> str:
        return "gs://" + os.path.relpath(local, self.root)

    def GFile(self, path, mode="r"):  # noqa: N802  (tf.io.gfile's name)
        self.calls.append("GFile")
        local = self._local(path)
        if "w" in mode or "a" in mode:
            os.makedirs(os.path.dirname(local), exist_ok=True)
        return open(local, mode, encoding=None if "b" in mode else "utf-8")

    def exists(self, path) -> bool:
        self.calls.append("exists")
        return os.path.exists(self._local(path))

    def rename(self, src, dst, overwrite=False) -> None:
        self.calls.append("rename")
        if not overwrite and os.path.exists(self._local(dst)):
            raise FileExistsError(dst)
        os.replace(self._local(src), self._local(dst))

    def glob(self, pattern) -> list[str]:
        self.calls.append("glob")
        return [self._url(p) for p in _glob.glob(self._local(pattern))]

    def walk(self, top):
        self.calls.append("walk")
        for dirpath, dirs, files in os.walk(self._local(top)):
            yield self._url(dirpath), dirs, files


@pytest.fixture
def fake_gcs(tmp_path, monkeypatch):
    import tensorflow as tf

    fake = _FakeGfile(str(tmp_path / "gcs"))
    for name in ("GFile", "exists", "rename", "glob", "walk"):
        monkeypatch.setattr(tf.io.gfile, name, getattr(fake, name))
    return fake


def _write_run(model_dir: str, run_id: str, size: str, n: int, losses: dict[int, float]) -> None:
    run = {
        "schema_version": 1, "run_id": run_id, "study": "s", "status": "finished",
        "model": {"family": "mini", "size": size, "config": {},
                  "params": {"total": n + 100, "embedding": 100, "non_embedding": n,
                             "encoder": n // 2, "decoder": n - n // 2},
                  "vocab_size": 512},
        "mixture": {"name": "m", "weights": {"en-de": 0.3, "en-zh": 0.7},
                    "caps": {"en-de": None, "en-zh": 1000}, "tasks": {}},
        "training": {"steps": max(losses), "batch_size": 8, "batch_tokens": 128,
                     "feature_lengths": {"inputs": 16, "targets": 16}, "seed": 0},
        "vocabulary": {"path": "v", "size": 512, "sha256": "0" * 64},
        "gin_config": "", "versions": {}, "extra": {},
    }
    run_files.write_run_json(model_dir, run)
    writer = run_files.MetricsWriter(model_dir, run_id)
    writer.write([dict(step=s, tokens=128 * s, task=pair, eval_set="validation", metric="loss",
                       value=v + (0.5 if pair == "en-zh" else 0.0))
                  for s, v in losses.items() for pair in ("en-de", "en-zh")])


def test_run_files_at_gs_urls_round_trip(fake_gcs):
    d = "gs://bucket/study/runs/r1"
    run_files.write_run_json(d, {"schema_version": 1, "run_id": "r1"})
    assert run_files.read_run_json(d) == {"schema_version": 1, "run_id": "r1"}
    assert "rename" in fake_gcs.calls  # written to a temporary object, then renamed
    w = run_files.MetricsWriter(d, "r1")
    assert w.write([dict(step=1, tokens=8, task="en-de", eval_set="validation",
                         metric="loss", value=2.0)]) == 1
    # a resumed writer (object stores cannot append: the object is rewritten) skips old rows
    w2 = run_files.MetricsWriter(d, "r1")
    assert w2.write([dict(step=1, tokens=8, task="en-de", eval_set="validation",
                          metric="loss", value=9.0),
                     dict(step=2, tokens=16, task="en-de", eval_set="validation",
                          metric="loss", value=1.5)]) == 1
    rows = run_files.read_metrics(d)
    assert [(r["step"], r["value"]) for r in rows] == [(1, 2.0), (2, 1.5)]
    local = os.path.join(fake_gcs.root, "bucket/study/runs/r1")
    assert sorted(os.listdir(local)) == ["metrics.jsonl", "run.json"]  # no temporaries left


def test_mnmt_export_collects_gs_run_directories(fake_gcs, tmp_path):
    _write_run("gs://bucket/study/runs/a", "a", "mini-1", 1000, {10: 3.0, 20: 2.5})
    _write_run("gs://bucket/study/runs/b", "b", "mini-2", 4000, {10: 2.8, 20: 2.0})
    for args in (["gs://bucket/study/runs/*"], ["gs://bucket/study"]):  # glob, or walk below
        out = tmp_path / "table.csv"
        assert export.main([*args, "--out", str(out)]) == 0
        df = pd.read_csv(out)
        assert sorted(df.run_id.unique()) == ["a", "b"]
        assert len(df) == 2 * 2 * 2  # runs × pairs × steps
        final = df[df.final & (df.pair == "en-zh")].set_index("run_id")
        assert final.loc["b", "value"] == pytest.approx(2.5)
        assert final.loc["b", "n"] == 4000 and final.loc["a", "weight"] == pytest.approx(0.7)
        assert final.loc["a", "data_size"] == 1000
    assert "glob" in fake_gcs.calls and "walk" in fake_gcs.calls


def test_mnmt_export_names_a_missing_gs_path(fake_gcs, capsys):
    assert export.main(["gs://bucket/nothing/*", "--out", "/dev/null"]) == 2
    assert "gs://bucket/nothing/*" in capsys.readouterr().err
