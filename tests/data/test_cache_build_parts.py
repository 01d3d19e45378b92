"""Cache builds whose parts each read only their share of the source (mnmt.data.cache.build):
the same shards whatever the number of parts, and the source read once in total."""

import gzip
import os

import pytest

N_PAIRS = 1500
IN_PROCESS = ("--runner=FnApiRunner", "--direct_running_mode=in_memory")


def in_process(parts: int) -> list[str]:
    """Beam options running ``parts`` parts in this process (a simulated multi-worker build)."""
    return [*IN_PROCESS, f"--direct_num_workers={parts}"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The same distinct cpu-tiny pairs as a TSV file, a gzip TSV and two aligned files."""
    from mnmt.data.synthetic import get_family

    folder = tmp_path_factory.mktemp("parts")
    pairs, seen = [], set()
    for pair in get_family("cpu-tiny").iter_texts("en-de", "train"):
        if pair not in seen:
            seen.add(pair)
            pairs.append(pair)
        if len(pairs) == N_PAIRS:
            break
    tsv = folder / "train.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    gz = folder / "train.tsv.gz"
    gz.write_bytes(gzip.compress(tsv.read_bytes()))
    src, tgt = folder / "train.en", folder / "train.de"
    src.write_text("".join(f"{s}\n" for s, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(f"{t}\n" for _, t in pairs), encoding="utf-8")
    return {"tsv": str(tsv), "gz": str(gz), "aligned": (str(src), str(tgt)), "pairs": pairs}


def build(task, tmp_path, parts, shards=6, **kwargs):
    from mnmt.data.cache import build_cache

    return build_cache(task, str(tmp_path / f"cache-{parts}"), num_parts=parts,
                       num_shards=shards, beam_args=in_process(parts), **kwargs)


@pytest.mark.parametrize("kind", ["tsv", "gz", "aligned"])
def test_every_number_of_parts_writes_the_same_shards(files, tiny_vocab, tmp_path, kind):
    """Example i in shard i % S, in order, whatever the parts: the shards' digests agree."""
    from mnmt.data.sources.bitext import register_bitext_task

    task = register_bitext_task(f"parts_{kind}_en_de", "en-de", tiny_vocab, {"train": files[kind]})
    one = build(task, tmp_path, 1)
    for parts in (2, 5):
        many = build(task, tmp_path, parts)
        assert many.build["parts"] == parts
        assert many.shard_sha256 == one.shard_sha256
        assert many.contents_digest() == one.contents_digest()
        assert many.tokens == one.tokens and many.length_histogram == one.length_histogram
    assert one.examples == N_PAIRS


def test_tsv_parts_read_the_file_once_in_total(files, tiny_vocab, tmp_path):
    """Byte ranges: every line and byte is read by exactly one part, whatever the parts (before,
    each of P parts read the whole file: P × the lines)."""
    from mnmt.data.sources.bitext import register_bitext_task

    task = register_bitext_task("parts_read_en_de", "en-de", tiny_vocab, {"train": files["tsv"]})
    size = os.path.getsize(files["tsv"])
    for parts in (1, 2, 4):
        read = build(task, tmp_path, parts).build["read"]
        assert len(read["parts"]) == parts
        assert sum(p["examples"] for p in read["parts"]) == N_PAIRS
        assert sum(p["bytes"] for p in read["parts"]) == size
        assert all(p["examples"] < N_PAIRS for p in read["parts"][1:] if parts > 1)
        # planning reads at most the rest of one line per cut
        assert read["bytes"] - size == read["plan"]["bytes"] < 200 * parts


def test_gettext_parts_take_their_block_of_the_pairs(tiny_vocab, tmp_path):
    """Gettext pairs (deduplicated over the domains at registration): each part reads its block."""
    from mnmt.data.sources.gettext import register_gettext_task, write_catalog
    from mnmt.data.synthetic import get_family

    texts = dict(zip(range(900), get_family("cpu-tiny").iter_texts("en-de", "train"),
                     strict=False))
    for domain, keys in (("one", range(0, 600)), ("two", range(300, 900))):
        write_catalog(str(tmp_path / "locale" / "de" / "LC_MESSAGES" / f"{domain}.mo"),
                      {f"{texts[k][0]} #{k}": texts[k][1] for k in keys})
    task = register_gettext_task("parts_gettext_en_de", "en-de", tiny_vocab,
                                 locale_dir=str(tmp_path / "locale"))
    one, three = build(task, tmp_path, 1), build(task, tmp_path, 3)
    assert three.shard_sha256 == one.shard_sha256
    assert [p["examples"] for p in one.build["read"]["parts"]] == [one.examples]
    assert sum(p["examples"] for p in three.build["read"]["parts"]) == one.examples
    assert max(p["examples"] for p in three.build["read"]["parts"]) <= one.examples // 3 + 1


def test_a_task_without_a_block_reader_still_writes_the_same_shards(tiny_vocab, tmp_path):
    """A synthetic task (its stream from a start: StreamParts) gives the same shards too."""
    from mnmt.data.tasks import register_synthetic_tasks

    task = register_synthetic_tasks("cpu-tiny", tiny_vocab, caps=700, prefix="partsyn")["en-de"]
    one, three = build(task, tmp_path, 1, shards=4), build(task, tmp_path, 3, shards=4)
    assert three.shard_sha256 == one.shard_sha256 and one.examples == 700


def test_parts_in_worker_processes_write_the_same_shards(files, tiny_vocab, tmp_path):
    """The default local runner (worker processes) gives the in-process build's shards."""
    from mnmt.data.cache import build_cache
    from mnmt.data.sources.bitext import register_bitext_task

    task = register_bitext_task("parts_mp_en_de", "en-de", tiny_vocab, {"train": files["tsv"]})
    one = build(task, tmp_path, 1)
    two = build_cache(task, str(tmp_path / "mp"), num_parts=2, num_shards=6)
    assert two.build["parts"] == 2 and "multi" not in two.build["runner"]
    assert two.shard_sha256 == one.shard_sha256
    assert sorted(os.listdir(tmp_path / "mp" / task)) == sorted(
        ["COMPLETED", "index.json", *(f"train.array_record-{s:05d}-of-00006" for s in range(6))])


@pytest.mark.parametrize("newline_at_end", [True, False])
def test_aligned_files_are_cut_into_matching_byte_ranges(tmp_path, newline_at_end):
    """Two aligned files: the driver scans both once for matching cuts, then the parts read
    each byte once — whatever the parts, even more than the lines — and yield the file's pairs
    in order; files of different lengths are refused when the build is planned."""
    from mnmt.data.sources.bitext import BitextError, BitextParts, read_bitext
    from mnmt.data.sources.parts import ReadCount

    end = "\n" if newline_at_end else ""
    src, tgt = tmp_path / "a.en", tmp_path / "a.de"
    src.write_text("\n".join(f"source {i} " + "x" * (i % 37) for i in range(101)) + end)
    tgt.write_text("\n".join(f"target {i} " + "y" * (i % 5) for i in range(101)) + end)
    reader = BitextParts({"train": (str(src), str(tgt))})
    whole = list(read_bitext(str(src), str(tgt)))
    size = src.stat().st_size + tgt.stat().st_size
    for parts in (1, 3, 120):
        planned, read = ReadCount(), ReadCount()
        blocks = reader.plan("train", parts, planned)
        assert [pair for b in blocks for pair in reader.read("train", b, read)] == whole
        assert (read.examples, read.bytes) == (101, size)
        assert planned.bytes <= size + 200 * parts
    tgt.write_text(tgt.read_text() + "one more\n" * (1 + (not newline_at_end)))
    with pytest.raises(BitextError, match=r"a.en: 101 lines but .*a.de has 102; expected aligned"):
        reader.plan("train", 2, ReadCount())


def test_tfds_parts_read_example_ranges_of_the_split(tmp_path, tiny_vocab):
    """A TFDS split (or its first D examples) is cut into absolute example ranges that TFDS
    reads without the rest; a percent slice stays one block."""
    tfds = pytest.importorskip("tensorflow_datasets")
    from mnmt.data.sources.parts import ReadCount, split_parts
    from mnmt.data.sources.tfds import read_tfds_pairs, register_tfds_task
    from mnmt.data.tasks import get_task_info

    class MnmtPartsTranslate(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self, features=tfds.features.Translation(languages=("de", "en")))

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples()}

        def _generate_examples(self):
            for i in range(40):
                yield i, {"en": f"the word {i}", "de": f"das Wort {i}"}

    builder = MnmtPartsTranslate(data_dir=str(tmp_path / "tfds"))
    builder.download_and_prepare()
    for theirs, n in (("train", 40), ("train[:25]", 25)):
        name = register_tfds_task(f"parts_tfds_{n}", builder, "en-de", tiny_vocab,
                                  splits={"train": theirs})
        reader = split_parts(get_task_info(name))
        blocks = reader.plan("train", 3, ReadCount())
        assert [b[0] for b in blocks] == {
            40: ["train[0:13]", "train[13:26]", "train[26:40]"],
            25: ["train[0:8]", "train[8:16]", "train[16:25]"]}[n]
        counts = [ReadCount() for _ in blocks]
        got = [pair for b, c in zip(blocks, counts, strict=True) for pair in reader.read("train", b, c)]
        assert got == list(read_tfds_pairs(builder, theirs, "en", "de"))
        assert [c.examples for c in counts] == [b[1] for b in blocks]
    name = register_tfds_task("parts_tfds_pct", builder, "en-de", tiny_vocab,
                              splits={"train": "train[:50%]"})
    assert len(split_parts(get_task_info(name)).plan("train", 3, ReadCount())) == 1
