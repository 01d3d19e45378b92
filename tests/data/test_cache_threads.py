"""One cached task read by many streams at once (mnmt.data.cache): every stream of a group —
each in its own input thread, at its own position — reads exactly what it would read alone."""

import sys
import threading
import time

import pytest

N_PAIRS = 257  # small and odd: the streams cross many epoch boundaries at unaligned positions
THREADS = 6
CHUNKS = 60   # takes per thread per round
ROUNDS = 3


@pytest.fixture(scope="module")
def cached_task(tmp_path_factory, tiny_vocab):
    from mnmt.data.cache import build_cache
    from mnmt.data.sources.bitext import register_bitext_task
    from mnmt.data.synthetic import get_family

    folder = tmp_path_factory.mktemp("threads_corpus")
    tsv = folder / "train.tsv"
    seen = set()
    with open(tsv, "w", encoding="utf-8") as f:
        for pair in get_family("cpu-tiny").iter_texts("en-de", "train"):
            if pair not in seen:
                seen.add(pair)
                f.write("\t".join(pair) + "\n")
            if len(seen) == N_PAIRS:
                break
    task = register_bitext_task("threads_test_en_de", "en-de", tiny_vocab, {"train": str(tsv)})
    cache_dir = str(tmp_path_factory.mktemp("threads_cache"))
    build_cache(task, cache_dir, num_parts=1, num_shards=4)
    return task, cache_dir


def _plan(t: int) -> tuple[int, list[int]]:
    """Thread t's start position and take sizes: pairs of threads a quarter of a read-ahead
    block apart (their blocks overlap), the pairs many blocks apart (a block shared by all
    would be replaced at almost every take), in other epochs; uneven takes."""
    return (t // 2) * 10007 + (t % 2) * 1009 + 13, [1 + (t * 7 + k * 5) % 23
                                                    for k in range(CHUNKS)]


def test_streams_of_one_cached_task_read_from_threads_equal_lone_readings(cached_task):
    from mnmt.data.pipeline import TaskStream

    task, cache_dir = cached_task
    lone = {}
    for t in range(THREADS):  # each plan read alone, one stream, no other reader
        start, sizes = _plan(t)
        stream = TaskStream(task, 5, (0, 1), start, cache_dirs=[cache_dir])
        lone[t] = [stream.take(n) for n in sizes]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        for _ in range(ROUNDS):
            streams = {t: TaskStream(task, 5, (0, 1), _plan(t)[0], cache_dirs=[cache_dir])
                       for t in range(THREADS)}
            assert len({id(s.cached) for s in streams.values()}) == 1  # one shared split
            got: dict[int, list] = {}
            barrier = threading.Barrier(THREADS)

            def read(t, streams=streams, got=got, barrier=barrier):
                barrier.wait()
                got[t] = []
                for n in _plan(t)[1]:
                    got[t].append(streams[t].take(n))
                    time.sleep(0)  # let the other threads take in between: interleaved reads

            threads = [threading.Thread(target=read, args=(t,)) for t in range(THREADS)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            for t in range(THREADS):
                assert len(got[t]) == CHUNKS, t
                for k, (a, b) in enumerate(zip(got[t], lone[t], strict=True)):
                    assert a == b, f"thread {t}, take {k}: other examples than read alone"
    finally:
        sys.setswitchinterval(old)
