"""Decoding a block of token-cache records at once (mnmt.data.cache.layout.decode_examples) and
reading a block shard by shard (mnmt.data.cache.reader: whole chunks or by index): exactly what
decoding and reading record by record give."""

import gc

import numpy as np
import pytest


def _record_by_record(record: bytes, dtype: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The layout's rule written out for one record: a 4-byte little-endian source length,
    then little-endian ids (an independent reading of the module docstring)."""
    n = int.from_bytes(record[:4], "little")
    width = np.dtype(dtype).itemsize
    ids = [int.from_bytes(record[4 + k * width:4 + (k + 1) * width], "little")
           for k in range((len(record) - 4) // width)]
    return tuple(ids[:n]), tuple(ids[n:])


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_a_block_decodes_to_exactly_the_per_record_decoding(dtype):
    from mnmt.data.cache.layout import decode_example, decode_examples, encode_example

    rng = np.random.default_rng(7)
    top = np.iinfo(dtype).max
    sides = [([], []), ([5], []), ([], [9]), ([0], [0]), ([top], [top, 0, top])]  # edges
    for _ in range(500):
        a, b = rng.integers(0, 80, size=2)
        sides.append((rng.integers(0, top, a, endpoint=True).tolist(),
                      rng.integers(0, top, b, endpoint=True).tolist()))
    sides.append((rng.integers(0, top, 70_000, endpoint=True).tolist(), [3]))  # length > 2**16
    records = [encode_example(s, t, dtype) for s, t in sides]
    rng.shuffle(records)
    expect = [_record_by_record(r, dtype) for r in records]
    got = decode_examples(records, dtype)
    assert got == expect
    assert all(type(i) is int for ex in got for side in ex for i in side)
    assert [decode_example(r, dtype) for r in records] == expect
    assert decode_examples([], dtype) == []
    assert sorted(expect) == sorted((tuple(s), tuple(t)) for s, t in sides)


def test_decoded_examples_leave_the_garbage_collectors_tracking():
    """Blocks a stream holds must not grow the collector's old generation (see
    decode_examples): after collections no decoded example is tracked (lists never are
    untracked)."""
    from mnmt.data.cache.layout import decode_examples, encode_example

    block = decode_examples([encode_example([3, 4], [5, 6, 7], "uint16")] * 1000, "uint16")
    gc.collect()  # untracks the sides (only ints inside) ...
    gc.collect()  # ... and then every pair whose sides were still tracked when it was visited
    assert not any(gc.is_tracked(ex) or gc.is_tracked(ex[0]) for ex in block)


@pytest.mark.parametrize("bad, message", [
    (b"\x01\x00", "record 1 of 2 bytes"),  # shorter than the header
    (b"\x01\x00\x00\x00\x05", "record 1 of 5 bytes"),  # a partial id
    (b"\x03\x00\x00\x00\x05\x00\x06\x00", "declares a 3-token source"),
])
def test_a_malformed_record_in_a_block_is_named(bad, message):
    from mnmt.data.cache.layout import decode_examples, encode_example

    good = encode_example([4, 5], [6], "uint16")
    with pytest.raises(ValueError, match=message):
        decode_examples([good, bad, good], "uint16")


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """A 2,000-example cache of 4 shards with 8 records a chunk, written with the layout."""
    from array_record.python.array_record_module import ArrayRecordWriter

    from mnmt.data.cache.layout import CacheIndex, encode_example, shard_name

    folder = tmp_path_factory.mktemp("decode_cache")
    rng = np.random.default_rng(3)
    n, shards, group = 2000, 4, 8
    examples = [(rng.integers(0, 4000, rng.integers(1, 30)).tolist(),
                 rng.integers(0, 4000, rng.integers(0, 30)).tolist()) for _ in range(n)]
    sizes = []
    for s in range(shards):
        writer = ArrayRecordWriter(str(folder / shard_name("train", s, shards)),
                                   f"group_size:{group}")
        for inputs, targets in examples[s::shards]:
            writer.write(encode_example(inputs, targets, "uint16"))
        writer.close()
        sizes.append((folder / shard_name("train", s, shards)).stat().st_size)
    index = CacheIndex(
        version=1, task="decode_test", pair="en-de", split="train", examples=n,
        num_shards=shards, shard_examples=[len(examples[s::shards]) for s in range(shards)],
        shard_bytes=sizes, shard_sha256=[""] * shards, tokens={}, max_length={},
        length_histogram={}, dtype="uint16", vocabulary={}, language_id=0, eos_id=1,
        separator_id=None, source={}, group_size=group, build={})
    return str(folder), index, examples


@pytest.mark.parametrize("host", [(0, 1), (1, 2)])
@pytest.mark.parametrize("dense", [0, 10**9])  # every shard read by chunks / every one by index
def test_a_block_read_shard_by_shard_is_the_examples_at_its_positions(split, host, dense,
                                                                      monkeypatch):
    from mnmt.data.cache import reader
    from mnmt.data.cache.reader import CachedSplit

    folder, index, examples = split
    monkeypatch.setattr(reader, "DENSE_FRACTION", dense)
    cached = CachedSplit(folder, index, host, ("decode_test", 0, *host))
    h, hosts = host
    for start, n in [(0, 4096), (cached.size - 3, 10), (517, 1), (1234, 700)]:
        local = cached.order.indices(start, n)
        expect = [tuple(map(tuple, examples[h + j * hosts]))  # as the module doc numbers
                  for j in local.tolist()]
        assert cached.examples(start, n) == expect, (start, n)
