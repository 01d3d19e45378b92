"""Token caches (mnmt.data.cache): built by Beam, read by index, never silently different data."""

import itertools
import json
import os
from collections import Counter

import pytest

N_PAIRS = 1200


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tiny_vocab):
    """A bitext TSV of distinct cpu-tiny pairs and its registered task."""
    from mnmt.data.sources.bitext import register_bitext_task
    from mnmt.data.synthetic import get_family

    folder = tmp_path_factory.mktemp("corpus")
    tsv = folder / "train.tsv"
    seen = set()
    with open(tsv, "w", encoding="utf-8") as f:
        for source, target in get_family("cpu-tiny").iter_texts("en-de", "train"):
            if (source, target) not in seen:
                seen.add((source, target))
                f.write(f"{source}\t{target}\n")
            if len(seen) == N_PAIRS:
                break
    task = register_bitext_task("cache_test_en_de", "en-de", tiny_vocab, {"train": str(tsv)})
    return {"tsv": tsv, "task": task, "vocab": tiny_vocab, "folder": folder}


@pytest.fixture(scope="module")
def built(corpus, tmp_path_factory):
    from mnmt.data.cache import build_cache

    cache_dir = str(tmp_path_factory.mktemp("cache"))
    index = build_cache(corpus["task"], cache_dir, num_parts=1, num_shards=4)
    return {"dir": cache_dir, "index": index, **corpus}


def in_memory(task):
    from mnmt.data.pipeline import in_memory_train_set
    from mnmt.data.tasks import get_task_info

    return in_memory_train_set(get_task_info(task), (0, 1))


def key(example):
    return (tuple(example[0]), tuple(example[1]))


def test_the_cache_holds_exactly_the_in_memory_examples_and_counts_them(built):
    from mnmt.data.cache import open_task_cache

    index = built["index"]
    memory = in_memory(built["task"])
    split = open_task_cache(built["task"], [built["dir"]], (0, 1), seed=0)
    epoch = split.examples(0, split.size)
    assert split.size == index.examples == N_PAIRS
    assert Counter(map(key, epoch)) == Counter(map(key, memory))  # token for token
    assert index.tokens == {"inputs": sum(len(s) for s, _ in memory),
                            "targets": sum(len(t) for _, t in memory)}
    assert index.max_length["targets"] == max(len(t) for _, t in memory)
    for side in ("inputs", "targets"):
        assert sum(index.length_histogram[side]) == N_PAIRS
    assert sum(index.shard_examples) == N_PAIRS and len(index.shard_examples) == 4
    assert index.shard_examples == [len(range(s, N_PAIRS, 4)) for s in range(4)]


def test_epochs_are_seeded_permutations_computed_from_the_position(built):
    from mnmt.data.cache.reader import CachedSplit

    index = built["index"]
    path = os.path.join(built["dir"], built["task"])
    a = CachedSplit(path, index, (0, 1), ("t", 0, 0, 1))
    n = a.size
    first, second = a.positions(0, n), a.positions(n, n)
    assert sorted(first) == list(range(n)) and sorted(second) == list(range(n))
    assert first != second and first != list(range(n))
    # any window of the stream, asked for alone, is the same as in one pass
    assert a.positions(n - 7, 20) == (first + second)[n - 7:n + 13]
    other_seed = CachedSplit(path, index, (0, 1), ("t", 1, 0, 1)).positions(0, n)
    assert other_seed != first


def test_train_inputs_on_a_cache_resume_exactly_from_their_state(built):
    from mnmt.data.pipeline import TrainInputs

    def make():
        return TrainInputs(built["task"], {"inputs": 32, "targets": 32}, batch_size=8, seed=3,
                           cache_dirs=[built["dir"]])

    whole = make()
    batches = [next(whole) for _ in range(120)]  # past one epoch of the 1,200 examples
    assert whole.get_state()["cached"] == [built["task"]]
    assert whole.get_state()["cursors"][built["task"]] > N_PAIRS
    resumed = make()
    for _ in range(57):
        next(resumed)
    state = json.loads(json.dumps(resumed.get_state()))
    again = make()
    again.set_state(state)
    for expect in batches[57:]:
        got = next(again)
        assert all((got[k] == expect[k]).all() for k in expect)


def test_an_up_to_date_cache_is_not_rebuilt(built):
    from mnmt.data.cache import build_cache

    marker = os.path.join(built["dir"], built["task"], "COMPLETED")
    before = os.stat(marker).st_mtime_ns
    lines = []
    index = build_cache(built["task"], built["dir"], num_parts=1, log=lines.append)
    assert os.stat(marker).st_mtime_ns == before
    assert index == built["index"] and "up to date" in lines[0]


def test_a_cache_of_another_vocabulary_is_refused_then_rebuilt(corpus, tmp_path):
    from mnmt.data.cache import CacheError, build_cache, open_task_cache
    from mnmt.data.sources.bitext import register_bitext_task
    from mnmt.data.synthetic import get_family
    from mnmt.data.vocab import train_vocabulary

    other = train_vocabulary(get_family("cpu-tiny"), str(tmp_path / "v2"), 500, n_per_pair=1500)
    name = "cache_test_vocab_en_de"
    register_bitext_task(name, "en-de", corpus["vocab"], {"train": str(corpus["tsv"])})
    cache_dir = str(tmp_path / "cache")
    build_cache(name, cache_dir, num_parts=1)
    register_bitext_task(name, "en-de", other, {"train": str(corpus["tsv"])})
    with pytest.raises(CacheError) as err:
        open_task_cache(name, [cache_dir], (0, 1), 0)
    message = str(err.value)
    assert "index.json" in message and "another vocabulary" in message and "rebuild" in message
    assert "\n" not in message
    lines = []
    index = build_cache(name, cache_dir, num_parts=1, log=lines.append)
    assert "another vocabulary" in lines[0]
    assert index.vocabulary["path"] == other and index.vocabulary["size"] <= 500
    assert open_task_cache(name, [cache_dir], (0, 1), 0).size == N_PAIRS


def test_a_changed_source_is_refused_then_rebuilt(corpus, tmp_path):
    from mnmt.data.cache import CacheError, build_cache, open_task_cache
    from mnmt.data.sources.bitext import register_bitext_task

    tsv = tmp_path / "grow.tsv"
    tsv.write_text(corpus["tsv"].read_text())
    name = "cache_test_source_en_de"
    register_bitext_task(name, "en-de", corpus["vocab"], {"train": str(tsv)})
    cache_dir = str(tmp_path / "cache")
    build_cache(name, cache_dir, num_parts=1)
    with open(tsv, "a", encoding="utf-8") as f:
        f.write("one more source\tnoch ein ziel\n")
    register_bitext_task(name, "en-de", corpus["vocab"], {"train": str(tsv)})
    with pytest.raises(CacheError, match="another source.*rebuild"):
        open_task_cache(name, [cache_dir], (0, 1), 0)
    assert build_cache(name, cache_dir, num_parts=1).examples == N_PAIRS + 1


def copy_cache(built, tmp_path):
    import shutil

    target = tmp_path / "cache"
    shutil.copytree(built["dir"], target)
    shard = target / built["task"] / "train.array_record-00001-of-00004"
    return str(target), shard


def test_a_truncated_shard_is_named_at_start(built, tmp_path):
    from mnmt.data.cache import CacheError, open_task_cache

    cache_dir, shard = copy_cache(built, tmp_path)
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(CacheError) as err:
        open_task_cache(built["task"], [cache_dir], (0, 1), 0)
    assert str(shard) in str(err.value) and "truncated" in str(err.value)
    assert "rebuild" in str(err.value)


def test_a_corrupt_shard_is_named_when_read_and_by_verify(built, tmp_path, capsys):
    from mnmt.data.cache import CacheError, open_task_cache
    from mnmt.data.cache.cli import main

    cache_dir, shard = copy_cache(built, tmp_path)
    data = bytearray(shard.read_bytes())
    for i in range(64, len(data) - 64, 7):  # same size, flipped bytes inside the chunks
        data[i] ^= 0x5A
    shard.write_bytes(bytes(data))
    split = open_task_cache(built["task"], [cache_dir], (0, 1), 0)
    with pytest.raises(CacheError) as err:
        split.examples(0, split.size)
    assert str(shard) in str(err.value) and "corrupt" in str(err.value)
    assert main(["verify", cache_dir]) == 1
    out = capsys.readouterr().out
    assert str(shard) in out and "SHA-256" in out


def test_an_incomplete_cache_is_never_read(built, tmp_path):
    from mnmt.data.cache import CacheError, open_task_cache

    cache_dir, _ = copy_cache(built, tmp_path)
    os.remove(os.path.join(cache_dir, built["task"], "COMPLETED"))
    with pytest.raises(CacheError, match="COMPLETED.*incomplete"):
        open_task_cache(built["task"], [cache_dir], (0, 1), 0)


def test_a_killed_build_leaves_nothing_a_reader_takes_and_is_cleaned(corpus, tmp_path):
    """A build killed mid-way leaves only its temporary directory (named with host and pid);
    readers look at <task>/ only, and the next build removes it when its process is gone."""
    import socket

    from mnmt.data.cache import build_cache, open_task_cache

    cache_dir = tmp_path / "cache"
    stale = cache_dir / f"{corpus['task']}.tmp-{socket.gethostname()}-999999999-abcd1234"
    stale.mkdir(parents=True)
    (stale / "train.array_record-00000-of-00004").write_bytes(b"partial")
    assert open_task_cache(corpus["task"], [str(cache_dir)], (0, 1), 0) is None
    build_cache(corpus["task"], str(cache_dir), num_parts=1, num_shards=4)
    assert sorted(os.listdir(cache_dir)) == [corpus["task"]]


def test_a_full_disk_fails_in_one_line_and_keeps_the_previous_cache(corpus, small_disk):
    from mnmt.data.cache import CacheBuildError, build_cache, open_task_cache

    cache_dir = str(small_disk.path / "cache")
    build_cache(corpus["task"], cache_dir, num_parts=1, num_shards=4)
    before = open_task_cache(corpus["task"], [cache_dir], (0, 1), 0).examples(0, 50)
    small_disk.fill()
    try:
        with pytest.raises(CacheBuildError) as err:
            build_cache(corpus["task"], cache_dir, num_parts=1, num_shards=4, force=True)
    finally:
        small_disk.free()
    message = str(err.value)
    assert "no space left on device" in message and cache_dir in message
    assert "\n" not in message
    assert sorted(os.listdir(cache_dir)) == [corpus["task"]]  # no temporary left behind
    from mnmt.data.cache import reader

    reader._OPEN.clear()
    assert open_task_cache(corpus["task"], [cache_dir], (0, 1), 0).examples(0, 50) == before


def test_hosts_must_divide_the_shards(built):
    from mnmt.data.cache import CacheError, open_task_cache

    with pytest.raises(CacheError, match="4 shards cannot be split evenly over 3 hosts"):
        open_task_cache(built["task"], [built["dir"]], (0, 3), 0)


def test_each_host_holds_its_in_memory_shard(built):
    """Host h of H reads shards s % H == h: the examples i % H == h the in-memory path holds."""
    from mnmt.data.cache import open_task_cache
    from mnmt.data.pipeline import in_memory_train_set
    from mnmt.data.tasks import get_task_info

    info = get_task_info(built["task"])
    for host in ((0, 2), (1, 2)):
        split = open_task_cache(built["task"], [built["dir"]], host, 0)
        assert [os.path.basename(p)[-14:-9] for p in split.paths] == [
            f"{s:05d}" for s in range(host[0], 4, 2)]
        assert Counter(map(key, split.examples(0, split.size))) == Counter(
            map(key, in_memory_train_set(info, host)))


def test_info_describes_a_cache(built, capsys):
    from mnmt.data.cache.cli import main

    assert main(["info", built["dir"]]) == 0
    out = capsys.readouterr().out
    assert f"{N_PAIRS:,} examples in 4 shards" in out and built["task"] in out
    size = os.path.getsize(built["tsv"]) / 1e6
    assert "1 parts, " in out and f"read {N_PAIRS:,} source lines or records, {size:,.1f} MB" in out
    assert main(["info", built["dir"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["examples"] == N_PAIRS


def test_records_round_trip_every_id_width():
    from mnmt.data.cache.layout import decode_example, encode_example

    for dtype, top in (("uint16", 2**16 - 1), ("uint32", 2**20)):
        inputs, targets = [5, top, 7], list(itertools.islice(itertools.count(top - 3), 4))
        assert decode_example(encode_example(inputs, targets, dtype), dtype) == (
            tuple(inputs), tuple(targets))
        assert decode_example(encode_example([], targets, dtype), dtype) == ((), tuple(targets))


def test_resuming_after_the_cache_was_resharded_is_refused(corpus, tmp_path):
    """The same stream position in a cache rebuilt with other shards is other examples: the
    checkpointed state carries a digest of the cache's contents and set_state refuses it."""
    from mnmt.data.cache import build_cache
    from mnmt.data.pipeline import TrainInputs

    cache_dir = str(tmp_path / "cache")

    def make():
        return TrainInputs(corpus["task"], {"inputs": 32, "targets": 32}, batch_size=8, seed=0,
                           cache_dirs=[cache_dir])

    build_cache(corpus["task"], cache_dir, num_parts=1, num_shards=4)
    first = make()
    next(first)
    state = first.get_state()
    build_cache(corpus["task"], cache_dir, num_parts=1, num_shards=4, force=True)
    same = make()
    same.set_state(state)  # rebuilt with the same contents: accepted
    assert (next(same)["encoder_input_tokens"] == next(first)["encoder_input_tokens"]).all()
    build_cache(corpus["task"], cache_dir, num_parts=1, num_shards=8, force=True)
    with pytest.raises(ValueError, match="cache_contents.*rebuilt"):
        make().set_state(state)


def test_registration_takes_the_training_size_from_a_cache_of_the_same_files(built, monkeypatch):
    """With a cache built from these very files, registering the task again does not read the
    corpus to validate it (its build did, with the same rules); a changed file is read."""
    from mnmt.data.sources import bitext
    from mnmt.data.tasks import get_task_info

    counted = []
    real_count = bitext.count_bitext
    monkeypatch.setattr(bitext, "count_bitext",
                        lambda *a, **k: counted.append(a[0]) or real_count(*a, **k))
    bitext.register_bitext_task(built["task"], "en-de", built["vocab"],
                                {"train": str(built["tsv"])}, cache_dirs=[built["dir"]])
    assert counted == [] and get_task_info(built["task"]).train_size == N_PAIRS
    bitext.register_bitext_task(built["task"], "en-de", built["vocab"],
                                {"train": str(built["tsv"])}, skip_malformed=True,
                                cache_dirs=[built["dir"]])  # another definition: validated
    assert counted == [str(built["tsv"])]
    bitext.register_bitext_task(built["task"], "en-de", built["vocab"],  # as the module had it
                                {"train": str(built["tsv"])}, cache_dirs=[built["dir"]])


def test_another_shard_count_rebuilds_and_any_count_splits_over_the_parts(corpus, tmp_path):
    """num_shards need not be a multiple of the parts: each example lands in shard i % S."""
    from mnmt.data.cache import CacheError, build_cache, open_task_cache

    cache_dir = str(tmp_path / "cache")
    assert build_cache(corpus["task"], cache_dir, num_parts=1, num_shards=4).num_shards == 4
    lines = []
    index = build_cache(corpus["task"], cache_dir, num_parts=1, num_shards=5, log=lines.append)
    assert "4 shards, 5 asked for" in lines[0]
    assert index.shard_examples == [len(range(s, N_PAIRS, 5)) for s in range(5)]
    memory = in_memory(corpus["task"])
    split = open_task_cache(corpus["task"], [cache_dir], (0, 1), 0)
    assert Counter(map(key, split.examples(0, split.size))) == Counter(map(key, memory))
    with pytest.raises(CacheError, match="local ArrayRecord files"):
        build_cache(corpus["task"], "gs://bucket/cache")
    assert not os.path.exists("gs:")
