"""The vocabulary's training text straight from registered tasks: balanced, seeded, bounded."""

import json
import random
import textwrap
import tracemalloc

import pytest

from mnmt.data.vocab import lang_piece, lang_token
from mnmt.data.vocab_sample import (
    first_examples,
    placeholder_vocabulary,
    reservoir_sample,
    sample_task_texts,
)
from mnmt.study.vocab_cli import main

BIG, SMALL = "vs_big_en_de", "vs_small_en_fr"


def _tsv(path, n, tag):
    path.write_text("".join(f"{tag} source {i}\t{tag} target {i}\n" for i in range(n)))
    return str(path)


@pytest.fixture(scope="module")
def placeholder(tmp_path_factory) -> str:
    return placeholder_vocabulary(["de", "en", "fr"], str(tmp_path_factory.mktemp("placeholder")))


@pytest.fixture(scope="module")
def corpora(tmp_path_factory, placeholder) -> dict:
    """A 5000-pair and a 40-pair bitext task (very different sizes)."""
    from mnmt.data.sources.bitext import register_bitext_task

    d = tmp_path_factory.mktemp("bitext")
    big = _tsv(d / "big.tsv", 5000, "big")
    small = _tsv(d / "small.tsv", 40, "small")
    register_bitext_task(BIG, "en-de", placeholder, {"train": big})
    register_bitext_task(SMALL, "en-fr", placeholder, {"train": small})
    return {"big": big, "small": small}


def test_reservoir_gives_every_item_the_same_chance():
    """Inclusion frequency of each of 10 items, 3 kept, over 3000 seeds: 0.3 each (the skip
    logic biased towards early or late items would show here); a char limit works alike."""
    items = [(f"x{i}", "y") for i in range(10)]  # 3 characters each
    for limits in ({"n": 3}, {"max_chars": 9}):
        counts = [0] * 10
        for seed in range(3000):
            kept, read = reservoir_sample(items, rng=random.Random(seed), **limits)
            assert len(kept) == 3 and read == 10
            for s, _ in kept:
                counts[int(s[1:])] += 1
        assert all(abs(c / 3000 - 0.3) < 0.04 for c in counts), counts


def test_reservoir_prefix_is_a_uniform_sample_of_a_long_stream():
    items = ((str(i), "") for i in range(20_000))
    kept, read = reservoir_sample(items, 1000, rng=random.Random(1))
    idx = [int(s) for s, _ in kept]
    assert read == 20_000 and len(set(idx)) == 1000
    # mean of 1000 draws from 0..19999: 10000 ± ~180 (sd); the first 200 are uniform too
    assert abs(sum(idx) / 1000 - 10_000) < 900
    assert abs(sum(idx[:200]) / 200 - 10_000) < 2000
    assert first_examples(iter(items), 5) == []  # the generator was read to its end
    assert first_examples(((str(i), "ab") for i in range(9)), max_chars=10) == [
        ("0", "ab"), ("1", "ab"), ("2", "ab")]


class _Counted(tuple):
    """A (source, target) pair that counts how many of its kind are alive at once."""

    alive = peak = 0

    def __new__(cls, *parts):
        _Counted.alive += 1
        _Counted.peak = max(_Counted.peak, _Counted.alive)
        return super().__new__(cls, parts)

    def __del__(self):
        _Counted.alive -= 1


def test_memory_stays_constant_while_streaming_a_million_examples(placeholder):
    """1M examples through a registered task, every 1000th of them counted: at no time are more
    than a few alive at once — a list of the stream would hold all 1000."""
    from mnmt.data.tasks import register_text_task

    plain = ("a b", "c d")
    register_text_task("vs_million_en_de", "en-de", placeholder, {"train": lambda: (
        plain if i % 1000 else _Counted("a b", "c d") for i in range(1_000_000))})
    stats = {}
    _Counted.alive = _Counted.peak = 0
    out = sample_task_texts(["vs_million_en_de"], 50, seed=0, stats=stats)
    assert stats["vs_million_en_de"]["read"] == 1_000_000
    assert len(out["vs_million_en_de"]) == 50
    assert 1 <= _Counted.peak <= 10, f"{_Counted.peak:,} counted examples alive at once"
    # and by bytes: a warm pass over 50K tiny examples allocates next to nothing
    items = ("a b", "c d")
    reservoir_sample(iter([items] * 10), 5, rng=random.Random(0))
    tracemalloc.start()
    try:
        kept, read = reservoir_sample((items for _ in range(50_000)), 50, rng=random.Random(0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert read == 50_000 and len(kept) == 50
    assert peak < 100_000, f"peak {peak:,} bytes while streaming"  # a list alone: 400 KB


def test_tasks_of_very_different_sizes_give_the_same_number_of_examples(corpora):
    stats = {}
    out = sample_task_texts([BIG, SMALL], 1000, seed=0, stats=stats)
    assert {k: len(v) for k, v in out.items()} == {BIG: 40, SMALL: 40}
    assert stats[BIG]["read"] == 5000 and stats[SMALL]["read"] == 40
    out = sample_task_texts([BIG, SMALL], 20, seed=0)
    assert {k: len(v) for k, v in out.items()} == {BIG: 20, SMALL: 20}
    lines = [int(s.split()[-1]) for s, _ in out[BIG]]
    assert max(lines) > 2500 and len(set(lines)) == 20  # drawn from the whole file
    assert all(s.startswith("big source") and t.startswith("big target") for s, t in out[BIG])


def test_sample_is_seeded_and_independent_of_task_order(corpora):
    a = sample_task_texts([BIG, SMALL], 20, seed=3)
    b = sample_task_texts([SMALL, BIG], 20, seed=3)
    assert a == b and list(a) == list(b)
    assert sample_task_texts([BIG], 20, seed=3)[BIG] == a[BIG]  # the other tasks do not matter
    assert sample_task_texts([BIG, SMALL], 20, seed=4)[BIG] != a[BIG]


def test_max_chars_bounds_the_whole_sample(corpora):
    def chars(out):
        return sum(len(s) + len(t) for v in out.values() for s, t in v)

    full = sample_task_texts([BIG, SMALL], 1000, seed=0)
    limited = sample_task_texts([BIG, SMALL], 1000, seed=0, max_chars=1000)
    assert chars(full) > 1000 >= chars(limited) > 500
    assert len(limited[BIG]) == len(limited[SMALL]) < 40
    with pytest.raises(ValueError, match="max_chars 20 leaves no example"):
        sample_task_texts([BIG, SMALL], 1000, seed=0, max_chars=20)


def test_unlimited_synthetic_stream_gives_its_first_examples(placeholder):
    from mnmt.data.synthetic import get_family
    from mnmt.data.tasks import register_synthetic_tasks

    names = register_synthetic_tasks("cpu-tiny", placeholder_vocabulary(
        ["de", "en", "zh"], str(placeholder).rsplit("/", 1)[0] + "/synth"), prefix="vs")
    out = sample_task_texts(names.values(), 30, seed=0, max_chars=10_000)
    first = list(zip(range(30), get_family("cpu-tiny").iter_texts("en-de", "train"), strict=False))
    assert out[names["en-de"]] == [st for _, st in first][: len(out[names["en-de"]])]
    assert len(out[names["en-de"]]) == len(out[names["en-zh"]]) == 30
    with pytest.raises(ValueError, match="needs a limit"):
        first_examples(iter([("a", "b")]))


def test_long_streams_log_their_progress(corpora, monkeypatch, caplog):
    import mnmt.data.vocab_sample as vocab_sample

    monkeypatch.setattr(vocab_sample, "PROGRESS_SECONDS", 0.0)
    with caplog.at_level("INFO", logger="mnmt.data.vocab_sample"):
        sample_task_texts([BIG], 10, seed=0)
    progress = [r.getMessage() for r in caplog.records if "/s), " in r.getMessage()]
    assert progress and progress[-1].startswith(f"vocabulary sample: {BIG}: ")
    assert "examples read (" in progress[-1] and progress[-1].endswith("10 kept")
    assert any("5,000 examples read in" in r.getMessage() for r in caplog.records)


def test_bad_task_names_splits_and_empty_splits_are_one_line_errors(corpora, placeholder):
    from mnmt.data.tasks import register_text_task

    with pytest.raises(ValueError, match=r"unknown task 'vs_bgi_en_de' \(did you mean "
                                         r"'vs_big_en_de'\?\); expected a task registered"):
        sample_task_texts(["vs_bgi_en_de"], 10)
    with pytest.raises(ValueError, match=r"has no split 'dev'; expected one of \['train'\]"):
        sample_task_texts([BIG], 10, split="dev")
    register_text_task("vs_empty_en_de", "en-de", placeholder,
                       {"train": lambda: iter(()), "validation": lambda: iter([("a", "b")])})
    with pytest.raises(ValueError, match="'vs_empty_en_de': split 'train' is empty; expected"):
        sample_task_texts([BIG, "vs_empty_en_de"], 10)
    with pytest.raises(ValueError, match="expected a limit"):
        sample_task_texts([BIG], None)


def test_cli_trains_from_bitext_and_synthetic_tasks(corpora, tmp_path, capsys):
    import sentencepiece as spm

    out = tmp_path / "vocab"
    assert main(["--bitext", f"en-fr={corpora['small']}", "--synthetic", "cpu-tiny",
                 "--out_dir", str(out), "--vocab_size", "300", "--n_per_pair", "200",
                 "--seed", "1"]) == 0
    path = capsys.readouterr().out.strip()
    assert path == str(out / "spm.model")
    sp = spm.SentencePieceProcessor(model_file=path)
    for code in ("de", "en", "fr", "zh"):  # the languages of the pairs
        assert sp.encode(f"{lang_token(code)} small source 3", out_type=str)[0] == lang_piece(code)
    meta = json.loads((out / "spm.json").read_text())
    assert meta["languages"] == ["de", "en", "fr", "zh"]
    tasks = meta["sample"]["tasks"]
    assert sorted(t["pair"] for t in tasks.values()) == ["en-de", "en-fr", "en-zh"]
    assert {t["kept"] for t in tasks.values()} == {40}  # balanced to the 40-pair bitext
    assert meta["num_texts"] == 3 * 40 * 2


def test_cli_study_trains_the_vocabulary_the_study_names(tmp_path, capsys, monkeypatch):
    """A real-data study's task module needs a vocabulary to register its tasks: mnmt-vocab
    registers them against a placeholder and writes StudySpec.vocabulary_path, with which the
    module then registers."""
    corpus = _tsv(tmp_path / "train.tsv", 60, "study")
    (tmp_path / "vs_study_tasks.py").write_text(textwrap.dedent(f"""
        from mnmt.data.sources.bitext import register_bitext_task

        def register_study_tasks(vocabulary_path, *, pairs=("en-de", "en-fr")):
            return {{p: register_bitext_task("vs_study_" + p.replace("-", "_"), p,
                                             vocabulary_path, {{"train": {corpus!r}}})
                     for p in pairs}}
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    vocab_path = tmp_path / "v" / "spm_study.model"
    gin_file = tmp_path / "study.gin"
    gin_file.write_text(textwrap.dedent(f"""
        StudySpec.pairs = ("en-de", "en-fr")
        StudySpec.tasks = (("en-de", "vs_study_en_de"), ("en-fr", "vs_study_en_fr"))
        StudySpec.task_module = "vs_study_tasks"
        StudySpec.vocabulary_path = "{vocab_path}"
        StudySpec.vocab_size = 200
    """))
    assert main(["--study", str(gin_file), "--n_per_pair", "30"]) == 0
    assert capsys.readouterr().out.strip() == str(vocab_path)
    meta = json.loads(vocab_path.with_suffix(".json").read_text())
    assert meta["languages"] == ["de", "en", "fr"] and meta["requested_vocab_size"] == 200
    assert sorted(meta["sample"]["tasks"]) == ["vs_study_en_de", "vs_study_en_fr"]
    import vs_study_tasks

    vs_study_tasks.register_study_tasks(str(vocab_path))  # the real vocabulary has the tokens


def test_cli_errors_are_one_line(corpora, tmp_path, capsys):
    rc = main(["--tasks", "vs_bgi_en_de", "--out_dir", str(tmp_path), "--vocab_size", "100"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    assert err.startswith("mnmt-vocab: error: unknown task 'vs_bgi_en_de' (did you mean "
                          "'vs_big_en_de'?)")
    assert main(["--bitext", "en-de", "--out_dir", str(tmp_path), "--vocab_size", "100"]) == 2
    assert "expected PAIR=VALUE, e.g. en-de=train.tsv" in capsys.readouterr().err
    assert main(["--tasks", BIG, "--vocab_size", "100"]) == 2
    assert "--out_dir is required" in capsys.readouterr().err
    assert main(["--study", "nonesuch", "--out_dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("mnmt-vocab: error: unknown preset 'nonesuch'")
    with pytest.raises(SystemExit):
        main(["--preset", "cpu-tiny", "--bitext", "en-de=x.tsv", "--out_dir", "o",
              "--vocab_size", "100"])
    assert "not several" in capsys.readouterr().err


def test_cli_samples_a_prepared_tfds_dataset(corpora, tmp_path_factory, capsys):
    tfds = pytest.importorskip("tensorflow_datasets")
    pairs = [(f"word{i} is here", f"wort{i} ist da") for i in range(30)]

    class MnmtVocabTinyTranslate(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self, features=tfds.features.Translation(languages=("de", "en")))

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples()}

        def _generate_examples(self):
            for i, (en, de) in enumerate(pairs):
                yield i, {"en": en, "de": de}

    data_dir = str(tmp_path_factory.mktemp("tfds"))
    MnmtVocabTinyTranslate(data_dir=data_dir).download_and_prepare()
    out = tmp_path_factory.mktemp("tfds_vocab")
    assert main(["--tfds", "de-en=mnmt_vocab_tiny_translate", "--tfds_data_dir", data_dir,
                 "--bitext", f"en-fr={corpora['small']}", "--out_dir", str(out),
                 "--vocab_size", "120"]) == 0
    meta = json.loads((out / "spm.json").read_text())
    tasks = meta["sample"]["tasks"]
    assert tasks["vocab_tfds_de_en"] == {"pair": "de-en", "read": 30, "kept": 30,
                                         "chars": sum(len(e) + len(d) for e, d in pairs)}
    assert meta["languages"] == ["de", "en", "fr"]
    assert main(["--tfds", "de-en=mnmt_vocab_tiny_translate", "--tfds_data_dir",
                 str(out / "nothing"), "--out_dir", str(out), "--vocab_size", "120"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("mnmt-vocab: error: TFDS dataset 'mnmt_vocab_tiny_translate' is not "
                          "prepared")


def test_cli_preset_is_the_model_it_always_was(tmp_path, capsys):
    from mnmt.data.vocab import main as vocab_main

    argv = ["--preset", "cpu-tiny", "--vocab_size", "300", "--n_per_pair", "200"]
    assert main([*argv, "--out_dir", str(tmp_path / "new")]) == 0
    assert vocab_main([*argv, "--out_dir", str(tmp_path / "old")]) == 0
    capsys.readouterr()
    assert (tmp_path / "new" / "spm.model").read_bytes() == \
        (tmp_path / "old" / "spm.model").read_bytes()
    with pytest.raises(SystemExit):
        main([*argv, "--out_dir", str(tmp_path), "--max_chars", "1000"])
    assert "--max_chars applies to task sources only" in capsys.readouterr().err
