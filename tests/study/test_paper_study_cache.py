"""The paper-scale study file `fernandes_en_de_zh.gin` runs through the token cache, end to end.

A tiny dataset in TFDS format stands in for WMT19: it is prepared under the name and configs
`mnmt.data.sources.wmt19` reads (`wmt19_translate/de-en`, `wmt19_translate/zh-en`, version 1.0.0)
in a temporary `TFDS_DATA_DIR`, so TFDS's own `Wmt19Translate` builder opens it — in this process
and in the study's worker processes — exactly as it opens the real, prepared WMT19. The study
file is run unchanged but for `--gin` overrides that make it tiny (zoo sizes nano/micro, a
64-piece vocabulary with <2en>/<2de>/<2zh> trained on the stand-in's text, float32, a few steps).

- `test_prepare_builds_caches_that_run_one_reads` (fast): `mnmt-study prepare` builds both tasks'
  caches, a second `prepare` finds them up to date, and one `run-one` trains from them;
- `test_study_file_runs_through_the_cache_end_to_end` (slow: nine runs, then the whole command
  again): `mnmt-study run` from the data stage to the report, every run reading the caches, and a
  second `run` in the same OUT that rebuilds nothing.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

tfds = pytest.importorskip("tensorflow_datasets")

from mnmt.data.cache import layout  # noqa: E402
from mnmt.study import cli  # noqa: E402

STUDY = "fernandes_en_de_zh"
TASKS = {"en-de": "wmt19_en_de", "en-zh": "wmt19_en_zh"}
# TFDS config -> (train, validation) examples; distinct train sizes tell the caches apart
SPLITS = {"de-en": (96, 16), "zh-en": (80, 16)}
TRAIN_SIZE = {TASKS["en-de"]: SPLITS["de-en"][0], TASKS["en-zh"]: SPLITS["zh-en"][0]}

_EN = ["the", "cat", "dog", "sees", "a", "house", "big", "small", "red", "runs", "home", "tree"]
_OTHER = {
    "de": ["der", "katze", "hund", "sieht", "ein", "haus", "gross", "klein", "rot", "laeuft",
           "heim", "baum"],
    "zh": ["这", "猫", "狗", "看", "一", "房", "大", "小", "红", "跑", "家", "树"],
}


def standin_pairs(config: str, split: str) -> list[tuple[str, str]]:
    """(English, other) sentences of one config's split: a word-for-word toy translation."""
    lang = config.split("-")[0]
    n = SPLITS[config][0 if split == "train" else 1]
    rng = random.Random(f"{config}/{split}")
    joiner = "" if lang == "zh" else " "
    out = []
    for _ in range(n):
        words = [rng.randrange(len(_EN)) for _ in range(rng.randint(3, 7))]
        out.append((" ".join(_EN[w] for w in words), joiner.join(_OTHER[lang][w] for w in words)))
    return out


class Wmt19TranslateStandIn(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """Writes what `tfds build wmt19_translate/{de-en,zh-en}` writes: same name, configs,
    version and features (`Translation` of the pair's two languages), tiny splits."""

    name = "wmt19_translate"
    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=config, version="1.0.0") for config in SPLITS]

    def _info(self):
        lang = self.builder_config.name.split("-")[0]
        return tfds.core.DatasetInfo(
            builder=self, features=tfds.features.Translation(languages=(lang, "en")))

    def _split_generators(self, dl_manager):
        del dl_manager
        return {split: self._generate_examples(split) for split in ("train", "validation")}

    def _generate_examples(self, split):
        lang = self.builder_config.name.split("-")[0]
        for i, (en, other) in enumerate(standin_pairs(self.builder_config.name, split)):
            yield i, {"en": en, lang: other}


@pytest.fixture(scope="module")
def wmt19_standin(tmp_path_factory) -> tuple[str, str]:
    """(TFDS data_dir holding the stand-in, path of its 64-piece en/de/zh vocabulary)."""
    from mnmt.data.vocab import train_vocabulary

    data_dir = str(tmp_path_factory.mktemp("tfds"))
    for config in SPLITS:
        Wmt19TranslateStandIn(config=config, data_dir=data_dir).download_and_prepare()
    # TFDS's registered builder (what the study's task module gets) must read the stand-in
    builder = tfds.builder("wmt19_translate/zh-en", data_dir=data_dir)
    assert type(builder).__name__ == "Wmt19Translate"
    assert builder.info.splits["train"].num_examples == SPLITS["zh-en"][0]
    texts = {config: standin_pairs(config, "train") for config in SPLITS}
    vocab = train_vocabulary(texts, str(tmp_path_factory.mktemp("vocab")), 64,
                             languages=["en", "de", "zh"])
    return data_dir, vocab


@pytest.fixture
def tfds_data_dir(wmt19_standin, monkeypatch) -> str:
    """Point TFDS's default data_dir (where `mnmt.data.sources.wmt19` looks) at the stand-in:
    `TFDS_DATA_DIR` for the study's worker processes, and TFDS's copy of it, read once when
    tensorflow_datasets was imported, for this process."""
    from tensorflow_datasets.core import constants

    data_dir = wmt19_standin[0]
    monkeypatch.setenv("TFDS_DATA_DIR", data_dir)
    monkeypatch.setattr(constants, "DATA_DIR", data_dir)
    return data_dir


def tiny(vocab: str, **fields: str) -> list[str]:
    """`--gin` overrides that shrink the paper-scale study file to seconds per run."""
    bindings = {
        "vocabulary_path": repr(vocab),
        "vocab_size": "64",
        "sizes": "('nano-1', 'nano-2', 'micro-1')",
        "weights": "(0.0, 0.5, 1.0)",
        "train_steps": "20",
        "train_steps_by_size": "()",
        "batch_tokens": "0",
        "batch_size": "8",
        "feature_lengths": "(('inputs', 16), ('targets', 16))",
        "eval_every": "10",
        "checkpoint_every": "10",
        "warmup_steps": "5",
        "activation_dtype": "'float32'",
        "num_decode_examples": "4",
        "report_target_sizes": "(2e6,)",
        **fields,
    }
    return [arg for name, value in bindings.items() for arg in ("--gin", f"StudySpec.{name}={value}")]


def completed_mtimes(cache_dir: Path) -> dict[str, int]:
    return {task: (cache_dir / task / layout.COMPLETED_FILE).stat().st_mtime_ns
            for task in TASKS.values()}


def check_caches(cache_dir: Path, vocab: str) -> None:
    """Both tasks' caches are complete, hold the stand-in's whole train split and name their
    vocabulary and TFDS dataset."""
    for pair, task in TASKS.items():
        directory = cache_dir / task
        assert (directory / layout.COMPLETED_FILE).is_file(), sorted(cache_dir.iterdir())
        index = layout.CacheIndex.read(str(directory / layout.INDEX_FILE))
        assert (index.task, index.pair, index.split) == (task, pair, "train")
        assert index.examples == sum(index.shard_examples) == TRAIN_SIZE[task]
        assert index.vocabulary["sha256"] == layout.file_sha256(vocab)
        config = "de-en" if pair == "en-de" else "zh-en"
        assert index.source["definition"]["dataset"].startswith(f"wmt19_translate/{config}")
        shards = sorted(p.name for p in directory.glob("train.array_record-*"))
        assert shards == [layout.shard_name("train", s, index.num_shards)
                          for s in range(index.num_shards)]


def input_state(run_dir: Path) -> dict:
    """The input pipeline's state in the run's latest checkpoint (host 0)."""
    steps = sorted((run_dir / "checkpoints").glob("step_*"), key=lambda p: int(p.name[5:]))
    assert steps, f"{run_dir}: no checkpoint"
    meta = json.loads((steps[-1] / "meta" / "metadata").read_text())
    return meta["inputs"]["0"]


def check_run_read_the_cache(run_dir: Path, cache_dir: Path) -> None:
    """The run finished, and its checkpointed input state says it read every trained task from
    the caches under `cache_dir` (the digest of each one's contents, as the trainer saw it)."""
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "finished", record["status"]
    trained = sorted(TASKS[pair] for pair, w in record["mixture"]["weights"].items() if w > 0)
    state = input_state(run_dir)
    assert state.get("cached") == trained, (run_dir.name, state)
    digests = {task: layout.CacheIndex.read(str(cache_dir / task / layout.INDEX_FILE))
               .contents_digest() for task in trained}
    assert state.get("cache_contents") == digests, (run_dir.name, state)


def test_prepare_builds_caches_that_run_one_reads(wmt19_standin, tfds_data_dir, tmp_path,
                                                  capsys):
    vocab = wmt19_standin[1]
    gin = tiny(vocab, sizes="('nano-1',)", weights="(0.5,)", decode_at_end="False")
    out = tmp_path / "study"
    run = "nano-1_p0.50_s0"

    # run-one only reads caches: before `prepare` it stops at the data stage, saying so
    assert cli.main(["run-one", STUDY, "--out", str(out), "--run", run, *gin]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "no token cache of wmt19_en_" in err and "mnmt-study prepare" in err, err
    assert not (out / "runs").exists()

    assert cli.main(["prepare", STUDY, "--out", str(out), *gin]) == 0
    err = capsys.readouterr().err
    cache_dir = out / "data" / "cache"
    check_caches(cache_dir, vocab)
    assert all(f"cache: building {task}" in err for task in TASKS.values()), err
    built = completed_mtimes(cache_dir)

    assert cli.main(["prepare", STUDY, "--out", str(out), *gin]) == 0
    err = capsys.readouterr().err
    for task, n in TRAIN_SIZE.items():
        assert f"cache: {task} up to date ({n:,} examples, {cache_dir / task})" in err, err
    assert "cache: building" not in err
    assert completed_mtimes(cache_dir) == built

    assert cli.main(["run-one", STUDY, "--out", str(out), "--run", run, *gin]) == 0
    check_run_read_the_cache(out / "runs" / run, cache_dir)
    assert completed_mtimes(cache_dir) == built


@pytest.mark.slow
def test_study_file_runs_through_the_cache_end_to_end(wmt19_standin, tfds_data_dir, tmp_path,
                                                      capsys):
    vocab = wmt19_standin[1]
    out = tmp_path / "study"
    command = ["run", STUDY, "--out", str(out), *tiny(vocab)]

    assert cli.main(command) == 0
    err = capsys.readouterr().err
    cache_dir = out / "data" / "cache"
    check_caches(cache_dir, vocab)
    assert all(f"cache: building {task}" in err for task in TASKS.values()), err
    built = completed_mtimes(cache_dir)
    run_dirs = sorted(p for p in (out / "runs").iterdir() if p.is_dir())
    assert len(run_dirs) == 9  # 3 sizes x 3 weights
    for run_dir in run_dirs:
        check_run_read_the_cache(run_dir, cache_dir)
    assert (out / "report" / "report.md").is_file()
    fits = json.loads((out / "report" / "fits.json").read_text())
    assert fits, "empty fits.json"
    assert (out / "metrics.csv").is_file()

    # the same command again: every run finished, the caches up to date, only the report redone
    assert cli.main(command) == 0
    err = capsys.readouterr().err
    for task, n in TRAIN_SIZE.items():
        assert f"cache: {task} up to date ({n:,} examples, {cache_dir / task})" in err, err
    assert "cache: building" not in err
    assert completed_mtimes(cache_dir) == built
    assert (out / "report" / "report.md").is_file()
