"""One epoch order for a seed (mnmt.data.epoch_order): the keyed bijection, the per-stream
read-ahead, and the same batches from a token cache as from memory — compared in order."""

import json

import numpy as np
import pytest

N_PAIRS = 300  # small: a few dozen batches cross an epoch boundary


@pytest.mark.parametrize("n", [1, 2, 3, 5, 16, 17, 100, 1023, 1025, 4097])
def test_feistel_permute_is_a_bijection_of_the_range(n):
    from mnmt.data.epoch_order import feistel_permute

    y = feistel_permute(np.arange(n), n, seed=12345)
    assert sorted(y.tolist()) == list(range(n))
    if n > 16:
        assert y.tolist() != list(range(n))
        assert feistel_permute(np.arange(n), n, seed=54321).tolist() != y.tolist()


def test_epoch_order_is_a_pure_function_of_the_position():
    from mnmt.data.epoch_order import EpochOrder
    from mnmt.data.synthetic.grammar import stable_seed

    order = EpochOrder(1000, ("t", 0, 0, 1))
    stream = order.indices(0, 2500)  # two and a half epochs
    for e in range(2):
        assert sorted(stream[e * 1000:(e + 1) * 1000].tolist()) == list(range(1000))
    assert stream[:1000].tolist() != stream[1000:2000].tolist()  # a fresh order each epoch
    assert order.indices(993, 20).tolist() == stream[993:1013].tolist()  # across the boundary
    assert order.epoch_seed(1) == stable_seed("epoch", "t", 0, 0, 1, 1)
    other = EpochOrder(1000, ("t", 1, 0, 1)).indices(0, 1000)
    assert other.tolist() != stream[:1000].tolist()


def test_a_block_reader_reads_ahead_and_returns_exactly_the_positions_asked():
    from mnmt.data.epoch_order import BlockReader

    calls = []

    def fetch(start, n):
        calls.append((start, n))
        return [start + k for k in range(n)]

    reader = BlockReader(fetch, block=100)
    assert reader.take(0, 30) == list(range(30))
    assert reader.take(30, 90) == list(range(30, 120))  # the rest of the block, then a new one
    assert reader.take(5, 3) == [5, 6, 7]  # backwards: read again, still exact
    assert calls == [(0, 100), (100, 100), (5, 100)]


@pytest.fixture(scope="module")
def cached_corpus(tmp_path_factory, tiny_vocab):
    """A bitext task of N_PAIRS distinct cpu-tiny pairs and its token cache (4 shards)."""
    from mnmt.data.cache import build_cache
    from mnmt.data.sources.bitext import register_bitext_task
    from mnmt.data.synthetic import get_family

    folder = tmp_path_factory.mktemp("order_corpus")
    tsv = folder / "train.tsv"
    seen = set()
    with open(tsv, "w", encoding="utf-8") as f:
        for pair in get_family("cpu-tiny").iter_texts("en-zh", "train"):
            if pair not in seen:
                seen.add(pair)
                f.write("\t".join(pair) + "\n")
            if len(seen) == N_PAIRS:
                break
    task = register_bitext_task("order_test_en_zh", "en-zh", tiny_vocab, {"train": str(tsv)})
    cache_dir = str(tmp_path_factory.mktemp("order_cache"))
    build_cache(task, cache_dir, num_parts=1, num_shards=4)
    return {"task": task, "dir": cache_dir}


def _inputs(task, shard, cache_dirs, seed=7):
    from mnmt.data.pipeline import TrainInputs

    return TrainInputs(task, {"inputs": 24, "targets": 24}, batch_size=8, seed=seed,
                       shard_info=shard, cache_dirs=cache_dirs)


@pytest.mark.parametrize("shard", [(0, 1), (0, 2), (1, 2)])
def test_the_same_batches_with_and_without_the_cache_across_an_epoch(cached_corpus, shard):
    task, cache = cached_corpus["task"], [cached_corpus["dir"]]
    cached, memory = _inputs(task, shard, cache), _inputs(task, shard, ())
    assert cached.cached_tasks() == [task] and memory.cached_tasks() == []
    per_shard = N_PAIRS // shard[1]
    n = 0
    while memory.get_state()["cursors"][task] <= per_shard + 10:  # past the epoch boundary
        a, b = next(cached), next(memory)
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"batch {n}, {k}")
        n += 1
    assert n > 5 and cached.get_state()["cursors"] == memory.get_state()["cursors"]


def test_a_run_resumes_across_switching_the_cache_on_or_off(cached_corpus):
    task, cache = cached_corpus["task"], [cached_corpus["dir"]]
    whole = _inputs(task, (0, 1), ())
    expect = [next(whole) for _ in range(40)]
    first = _inputs(task, (0, 1), cache)
    for _ in range(17):
        next(first)
    state = json.loads(json.dumps(first.get_state()))
    assert state["cached"] == [task]
    again = _inputs(task, (0, 1), ())  # the same order in memory: resumes exactly
    again.set_state(state)
    for want in expect[17:]:
        got = next(again)
        assert all((got[k] == want[k]).all() for k in want)


def test_an_input_state_of_the_former_order_is_refused_naming_it(cached_corpus):
    inputs = _inputs(cached_corpus["task"], (0, 1), ())
    state = dict(inputs.get_state(), version=1)
    with pytest.raises(ValueError, match="version 1 visited finite training sets in another "
                                         "order"):
        inputs.set_state(state)
