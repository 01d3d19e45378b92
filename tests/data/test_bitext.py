"""Bitext files: TSV / aligned / gzip, malformed lines named by file and line, skip-and-count."""

import gzip

import pytest

from mnmt.data.sources.bitext import BitextError, count_bitext, read_bitext, register_bitext_task


def _write(path, data: bytes, gz: bool = False):
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return str(path)


def test_tsv_gzip_and_aligned_files(tmp_path):
    tsv = _write(tmp_path / "a.tsv.gz", b"hello\thallo\n good day \t guten Tag \n", gz=True)
    assert list(read_bitext(tsv)) == [("hello", "hallo"), ("good day", "guten Tag")]
    s = _write(tmp_path / "s.txt", b"one\ntwo\n")
    t = _write(tmp_path / "t.txt", b"eins\nzwei\n")
    assert list(read_bitext(s, t)) == [("one", "eins"), ("two", "zwei")]
    multi = _write(tmp_path / "m.tsv", b"id1\tx\ty\n")
    assert list(read_bitext(multi, columns=(1, 2))) == [("x", "y")]


@pytest.mark.parametrize("content,line,what", [
    (b"a\tb\nc\td\te\n", 2, "3 tab-separated column"),
    (b"a\tb\n\tx\n", 2, "empty source side"),
    (b"a\tb\nc\t \n", 2, "empty target side"),
    (b"a\tb\nx\tb\xff\xfe\n", 2, "invalid UTF-8"),
    (b"a\tb\n\n", 2, "empty line"),
    (b"only one column\n", 1, "1 tab-separated column"),
])
def test_malformed_lines_name_file_and_line(tmp_path, content, line, what):
    path = _write(tmp_path / "bad.tsv", content)
    with pytest.raises(BitextError, match=rf"bad\.tsv:{line}: .*{what}"):
        list(read_bitext(path))
    st = count_bitext(path, skip_malformed=True)
    assert st.skipped == 1 and st.read == len(content.splitlines()) - 1


def test_aligned_files_of_different_length(tmp_path):
    s = _write(tmp_path / "s.txt", b"one\ntwo\nthree\n")
    t = _write(tmp_path / "t.txt", b"eins\nzwei\n")
    with pytest.raises(BitextError, match=r"t\.txt:3: file ends after 2 lines but .*s\.txt continues"):
        list(read_bitext(s, t))


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.tsv"):
        list(read_bitext(str(tmp_path / "nope.tsv")))
    bad_gz = _write(tmp_path / "x.tsv.gz", b"not gzip at all")
    with pytest.raises(BitextError, match="x.tsv.gz"):
        list(read_bitext(bad_gz))


def test_register_bitext_task_trains_and_evaluates(tmp_path, tiny_vocab):
    import numpy as np

    from mnmt.data.pipeline import TrainInputs, eval_examples
    from mnmt.data.synthetic import get_family

    fam = get_family("cpu-tiny")
    ex = fam.sample("en-de", "train", 60)
    train = "".join(f"{e.source}\t{e.target}\n" for e in ex[:50]) + "broken line\n"
    tr = _write(tmp_path / "train.tsv.gz", train.encode(), gz=True)
    va_s = _write(tmp_path / "val.en", "".join(e.source + "\n" for e in ex[50:]).encode())
    va_t = _write(tmp_path / "val.de", "".join(e.target + "\n" for e in ex[50:]).encode())
    with pytest.raises(BitextError, match=r"train\.tsv\.gz:51"):
        register_bitext_task("bt_strict", "en-de", tiny_vocab, {"train": tr})
    name = register_bitext_task("bt_en_de", "en-de", tiny_vocab,
                                {"train": tr, "validation": (va_s, va_t)}, skip_malformed=True)
    from mnmt.data.tasks import get_task_info

    assert get_task_info(name).train_size == 50
    assert eval_examples(name, "validation") == [(e.source, e.target) for e in ex[50:]]
    it = TrainInputs(name, {"inputs": 32, "targets": 32}, 4, seed=0, pack=False)
    seen = {tuple(r[r != 0]) for _ in range(13) for r in next(it)["decoder_target_tokens"]}
    assert len(seen) == 50  # 52 rows: one full epoch of 50 distinct examples, then the next one
    assert np.all([s[-1] == 1 for s in seen])
    with pytest.raises(ValueError, match="no single piece"):
        register_bitext_task("bt_xx", "en-xx", tiny_vocab, {"train": tr}, skip_malformed=True)


def test_reads_through_tf_gfile_filesystems():
    """Non-local paths go through tf.io.gfile (ram:// here; gs:// works the same way)."""
    import tensorflow as tf

    path = "ram://mnmt-test/corpus.tsv.gz"
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(gzip.compress(b"a b\tc d\ne\tf\n"))
    assert list(read_bitext(path)) == [("a b", "c d"), ("e", "f")]


def test_skipped_lines_are_counted_in_the_log(tmp_path, caplog):
    import logging

    path = _write(tmp_path / "mixed.tsv", b"a\tb\nbad\nc\t\n\xff\tx\nd\te\n")
    with caplog.at_level(logging.WARNING, logger="mnmt.data.sources.bitext"):
        pairs = list(read_bitext(path, skip_malformed=True))
    assert pairs == [("a", "b"), ("d", "e")]
    (rec,) = [r for r in caplog.records if "skipped" in r.getMessage()]
    msg = rec.getMessage()
    assert "mixed.tsv" in msg and "read 2 pairs, skipped 3 malformed" in msg
    st = count_bitext(path, skip_malformed=True)
    assert (st.read, st.skipped) == (2, 3) and sum(st.reasons.values()) == 3


def test_empty_sources_are_errors(tmp_path, tiny_vocab):
    empty = _write(tmp_path / "empty.tsv", b"")
    assert list(read_bitext(empty)) == []
    with pytest.raises(ValueError, match=r"split 'train'.*no usable lines in .*empty\.tsv"):
        register_bitext_task("bt_empty", "en-de", tiny_vocab, {"train": empty})
    junk = _write(tmp_path / "junk.tsv.gz", b"no tab here\n\n", gz=True)
    with pytest.raises(ValueError, match=r"no usable lines in .*junk\.tsv\.gz"):
        register_bitext_task("bt_junk", "en-de", tiny_vocab, {"train": junk}, skip_malformed=True)
    with pytest.raises(ValueError, match="expected at least one split"):
        register_bitext_task("bt_none", "en-de", tiny_vocab, {})
    with pytest.raises(ValueError, match="invalid language code 'EN'.*expected lowercase"):
        register_bitext_task("bt_code", "EN-de", tiny_vocab, {"train": empty}, validate=False)
