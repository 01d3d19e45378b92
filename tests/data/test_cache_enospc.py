"""A cache build that runs out of disk space (mnmt.data.cache.build): one clear line naming the
directory and what to do, the previous cache untouched, nothing half-written readable, no
temporary directory left."""

import errno
import os

import pytest

N_PAIRS = 1500
PARTS = ["--runner=FnApiRunner", "--direct_running_mode=in_memory", "--direct_num_workers=3"]


@pytest.fixture(scope="module")
def task(tmp_path_factory, tiny_vocab):
    from mnmt.data.sources.bitext import register_bitext_task
    from mnmt.data.synthetic import get_family

    tsv = tmp_path_factory.mktemp("enospc") / "train.tsv"
    lines: dict[str, None] = {}  # distinct lines, in order
    for source, target in get_family("cpu-tiny").iter_texts("en-de", "train"):
        lines[f"{source}\t{target}\n"] = None
        if len(lines) == N_PAIRS:
            break
    tsv.write_text("".join(lines), encoding="utf-8")
    return register_bitext_task("enospc_en_de", "en-de", tiny_vocab, {"train": str(tsv)})


def build(task, cache_dir, **kwargs):
    from mnmt.data.cache import build_cache

    return build_cache(task, str(cache_dir), num_parts=3, num_shards=6, beam_args=PARTS, **kwargs)


def assert_clean_failure(err, task, cache_dir, before):
    """One line naming the directory and what to do; the previous cache complete, unchanged
    and the only thing a reader finds; no temporary directory left."""
    from mnmt.data.cache.build import read_complete_index
    from mnmt.data.cache.cli import verify_cache

    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{cache_dir}: no space left on device")
    assert "free space" in message and "previous cache" in message
    assert [n for n in os.listdir(cache_dir) if ".tmp-" in n or ".old-" in n] == []
    path = os.path.join(cache_dir, task)
    assert read_complete_index(path).contents_digest() == before.contents_digest()
    assert verify_cache(path) == []  # every shard's digest and every record


def test_a_disk_filling_up_during_a_multi_part_build(task, small_disk):
    """A real tmpfs with a few pages left: the parts' pieces run out of space mid-build."""
    from mnmt.data.cache import CacheBuildError

    cache_dir = small_disk.path / "cache"
    before = build(task, cache_dir)
    small_disk.fill()
    filler = small_disk.filler
    os.truncate(filler, os.path.getsize(filler) - 12 * 4096)  # 12 pages: fewer than 18 pieces
    try:
        with pytest.raises(CacheBuildError) as err:
            build(task, cache_dir, force=True)
    finally:
        small_disk.free()
    assert_clean_failure(err, task, str(cache_dir), before)
    assert build(task, cache_dir, force=True).contents_digest() == before.contents_digest()


class _FullAfter:
    """An ArrayRecordWriter whose writes fail as ArrayRecord reports ENOSPC after ``limit``
    records (over all writers)."""

    real = None
    written = 0
    limit = 0

    def __init__(self, path, options):
        self.writer = self.real(path, options)

    def write(self, record):
        if type(self).written >= self.limit:
            raise RuntimeError("DATA_LOSS: Writing to file failed: No space left on device [28]")
        type(self).written += 1
        self.writer.write(record)

    def close(self):
        self.writer.close()


@pytest.mark.parametrize("limit", [700, 2 * N_PAIRS - 100])  # in the parts; in the shards' merge
def test_a_write_failing_with_enospc_in_a_worker(task, tmp_path, monkeypatch, limit):
    from array_record.python import array_record_module

    from mnmt.data.cache import CacheBuildError

    cache_dir = tmp_path / "cache"
    before = build(task, cache_dir)
    monkeypatch.setattr(_FullAfter, "real", array_record_module.ArrayRecordWriter)
    monkeypatch.setattr(_FullAfter, "limit", limit)
    monkeypatch.setattr(array_record_module, "ArrayRecordWriter", _FullAfter)
    with pytest.raises(CacheBuildError) as err:
        build(task, cache_dir, force=True)
    assert _FullAfter.written == limit
    assert_clean_failure(err, task, str(cache_dir), before)


def test_enospc_while_the_driver_finishes_the_cache(task, tmp_path, monkeypatch):
    """ENOSPC in the driver (writing COMPLETED) gets the same message, not the generic one."""
    from mnmt.data.cache import CacheBuildError, layout
    from mnmt.data.cache import build as build_module

    cache_dir = tmp_path / "cache"
    before = build(task, cache_dir)

    def full_open(path, *args, **kwargs):
        if str(path).endswith(layout.COMPLETED_FILE):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return open(path, *args, **kwargs)

    monkeypatch.setattr(build_module, "open", full_open, raising=False)
    with pytest.raises(CacheBuildError) as err:
        build(task, cache_dir, force=True)
    assert "while finishing" in str(err.value)
    assert_clean_failure(err, task, str(cache_dir), before)
