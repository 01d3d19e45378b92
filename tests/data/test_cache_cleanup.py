"""A failed cache build leaves no temporary directory even when a Beam worker still writes into
it while it is removed (mnmt.data.cache.build.remove_unfinished_build). Before (2516119) the
driver removed it once: a shard file created during that pass kept the directory, which
`test_a_write_failing_with_enospc_in_a_worker` saw once in a loaded full-suite run."""

import shutil

from mnmt.data.cache import build


def test_a_file_written_during_the_removal_does_not_keep_the_build(tmp_path, monkeypatch):
    tmp = tmp_path / "task.tmp-host-1-abcd"
    tmp.mkdir()
    (tmp / "shard-00000").write_bytes(b"x")
    real_rmtree, calls = shutil.rmtree, []

    def racing_rmtree(path, ignore_errors=False):
        calls.append(path)
        real_rmtree(path, ignore_errors=ignore_errors)
        if len(calls) == 1:  # a worker still merging shards writes after the first pass
            tmp.mkdir()
            (tmp / "shard-00001").write_bytes(b"y")

    monkeypatch.setattr(build.shutil, "rmtree", racing_rmtree)
    build.remove_unfinished_build(str(tmp))
    assert not tmp.exists() and len(calls) == 2
