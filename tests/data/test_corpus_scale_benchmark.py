"""benchmarks/speed/corpus_scale.py: the corpus it writes, and its one JSON object at a tiny size."""

import json
import os

import pytest

TINY = ["--pool", "400", "--vocab_pairs", "600", "--vocab_size", "1000", "--batches", "5"]


@pytest.fixture
def bench(benchmark_script):
    return benchmark_script("corpus_scale")


def test_corpus_is_a_prefix_family_reused_and_sharded_in_order(bench, tmp_path):
    args = bench.parse_args(["--work_dir", str(tmp_path), *TINY])
    pool = bench.prepare_pool(args, log=lambda m: None)
    assert 390 <= pool["distinct_pool_pairs"] <= 400 and not pool["reused"]
    # ≈ 25 tokens a side (a 400-pair pool: loose bounds)
    assert all(15 < pool["mean_tokens"][k] < 35 for k in ("inputs", "targets"))
    assert bench.prepare_pool(args, log=lambda m: None)["reused"]
    small = bench.write_corpus(pool, 0, 300, log=lambda m: None)
    large = bench.write_corpus(pool, 0, 700, log=lambda m: None)
    with open(small["path"], "rb") as f:
        small_lines = f.readlines()
    with open(large["path"], "rb") as f:
        large_lines = f.readlines()
    assert len(small_lines) == 300 and len(large_lines) == 700
    assert large_lines[:300] == small_lines  # a smaller corpus is the first lines of a larger
    assert all(line.count(b"\t") == 1 for line in large_lines)
    assert bench.write_corpus(pool, 0, 300, log=lambda m: None)["reused"]
    shards = bench.write_shards(pool, 0, 700, 3, log=lambda m: None)
    files = sorted(os.listdir(os.path.dirname(shards["pattern"])))
    assert len(files) == 3
    joined = b"".join(open(os.path.join(os.path.dirname(shards["pattern"]), f), "rb").read()
                      for f in files)
    assert joined == b"".join(large_lines)


def test_the_real_text_corpus_is_every_catalog_line_repeated_with_a_tag(bench, tmp_path):
    """--corpus gettext: the distinct lines of every catalog (a line in two catalogs once), then
    the same lines with the source tagged by the repetition: every corpus line distinct."""
    from mnmt.data.sources.gettext import write_catalog

    locale = tmp_path / "locale"
    texts = {f"Open file {i}": f"Datei {i} öffnen" for i in range(150)}
    write_catalog(str(locale / "de" / "LC_MESSAGES" / "a.mo"), dict(list(texts.items())[:100]))
    write_catalog(str(locale / "de" / "LC_MESSAGES" / "b.mo"), dict(list(texts.items())[50:]))
    write_catalog(str(locale / "fr" / "LC_MESSAGES" / "a.mo"),
                  {f"Open file {i}": f"Ouvrir {i}" for i in range(40)})
    args = bench.parse_args(["--work_dir", str(tmp_path / "w"), "--corpus", "gettext",
                             "--locale_dir", str(locale), "--vocab_size", "300", *TINY[:2]])
    pool = bench.prepare_pool(args, log=lambda m: None)
    assert pool["pool_pairs"] == 190 and pool["catalog_files"] == 3 and pool["pair"] == "en-mul"
    corpus = bench.write_corpus(pool, 0, 500, log=lambda m: None)
    with open(corpus["path"], "rb") as f:
        lines = f.readlines()
    with open(pool["pool_path"], "rb") as f:
        pool_lines = f.readlines()
    assert len(lines) == 500 == len(set(lines))
    assert lines[:190] == pool_lines
    assert lines[190:380] == [b"[1] " + ln for ln in pool_lines]
    assert lines[499] == b"[2] " + pool_lines[499 - 380]
    assert {ln.decode().rstrip("\n") for ln in pool_lines} == (
        {f"{s}\t{t}" for s, t in texts.items()} | {f"Open file {i}\tOuvrir {i}" for i in range(40)})


def test_targets_pass_and_fail(bench):
    r = {"pairs": 20_000_000, "startup_s": 4.0, "input_rss_mb": 301.0,
         "build_pairs_per_s": 25_000.0, "tokens_per_s": 10.0, "seqio": {"tokens_per_s": 11.0}}
    t = bench._targets(r, None)
    assert t["startup_s"]["pass"] is True and t["input_rss_mb"]["pass"] is False
    assert t["build_pairs_per_s"]["pass"] is True and t["tokens_per_s"]["pass"] is False
    assert bench._targets({"pairs": 10}, None)["startup_s"]["pass"] is None


def _check_read(part: dict) -> None:
    for key in ("startup_s", "input_rss_mb", "tokens_per_s", "register_s", "first_batch_s"):
        assert part[key] >= 0, (key, part)
    assert part["startup_s"] > 0 and part["tokens_per_s"] > 0
    assert part["startup_s"] == pytest.approx(part["register_s"] + part["first_batch_s"],
                                              abs=2e-3)
    assert part["tokens_per_s"] == pytest.approx(part["tokens"] / part["seconds"], rel=1e-3)
    assert part["input_rss_mb"] == pytest.approx(
        part["peak_rss_mb"] - part["rss_after_imports_mb"] + part["children_peak_rss_mb"],
        abs=0.2)
    assert part["batch_shape"]["encoder_input_tokens"] == [48, 64]


def test_uncached_part_prints_one_consistent_json_object(bench, tmp_path, capsys):
    rc = bench.main(["--json", "--work_dir", str(tmp_path), "--pairs", "2000",
                     "--uncached-pairs", "1000", "--skip-cached", "--skip-seqio", *TINY])
    r = json.loads(capsys.readouterr().out)
    assert rc == 0, r.get("errors")
    for key in ("pairs", "command", "date", "machine", "versions", "corpus", "shape", "targets"):
        assert key in r
    assert r["pairs"] == 2000 and r["corpus"]["pairs"] == 2000
    assert r["machine"]["cpus"] >= 1 and len(r["machine"]["load_avg"]) == 3
    u = r["uncached"]
    assert u["pairs"] == 1000
    _check_read(u)
    # packed: about two 27-token examples per 64-token row
    assert u["examples"] > 5 * 48


@pytest.mark.slow
def test_all_three_parts_at_a_tiny_size(bench, tmp_path, capsys):
    pytest.importorskip("mnmt.data.cache")
    rc = bench.main(["--json", "--work_dir", str(tmp_path), "--pairs", "2000",
                     "--uncached-pairs", "1000", "--seqio-pairs", "1000", "--seqio-shards", "4",
                     "--seqio-min-shards", "4", *TINY])
    r = json.loads(capsys.readouterr().out)
    assert rc == 0, r.get("errors")
    for part in (r, r["uncached"], r["seqio"]):
        _check_read(part)
    for part, n in ((r, 2000), (r["seqio"], 1000)):
        assert part["cache_bytes"] > 0 and part["cache_build_s"] > 0
        assert part["build_pairs_per_s"] == pytest.approx(n / part["cache_build_s"], rel=1e-2)
    assert r["seqio"]["cached_examples"] == 1000
    assert set(r["targets"]) >= {"startup_s", "input_rss_mb", "build_pairs_per_s",
                                 "tokens_per_s"}
