"""TFDS translation source, on a small dataset in TFDS format that the test builds itself."""

import pytest

tfds = pytest.importorskip("tensorflow_datasets")


PAIRS = [(f"word{i} is here", f"wort{i} ist da") for i in range(30)]


class MnmtTinyTranslate(tfds.core.GeneratorBasedBuilder):
    """A two-language translation dataset with the features of wmt*_translate."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self, features=tfds.features.Translation(languages=("de", "en"))
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(0, 24), "validation": self._generate_examples(24, 30)}

    def _generate_examples(self, a, b):
        for i in range(a, b):
            en, de = PAIRS[i]
            yield i, {"en": en, "de": de}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    MnmtTinyTranslate(data_dir=data_dir).download_and_prepare()
    return data_dir


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    from mnmt.data.vocab import train_vocabulary

    texts = [t for p in PAIRS for t in p] * 5
    return train_vocabulary(texts, str(tmp_path_factory.mktemp("v")), 60, languages=["de", "en"])


def test_both_directions_read_the_right_sides(prepared, vocab):
    from mnmt.data.pipeline import eval_examples
    from mnmt.data.sources.tfds import register_tfds_task
    from mnmt.data.tasks import get_task_info

    ende = register_tfds_task("tfds_tiny_en_de", "mnmt_tiny_translate", "en-de", vocab, data_dir=prepared)
    deen = register_tfds_task("tfds_tiny_de_en", "mnmt_tiny_translate", "de-en", vocab, data_dir=prepared)
    assert get_task_info(ende).split_sizes == {"train": 24, "validation": 6}
    val = eval_examples(ende, "validation")
    assert sorted(val) == sorted(PAIRS[24:30])
    assert sorted(eval_examples(deen, "validation")) == sorted((d, e) for e, d in PAIRS[24:30])


def test_seqio_task_tokenizes_with_language_token(prepared, vocab):
    import seqio

    from mnmt.data.sources.tfds import register_tfds_task
    from mnmt.data.vocab import get_vocabulary, language_token_id

    name = register_tfds_task("tfds_tiny_en_de2", "mnmt_tiny_translate", "en-de", vocab,
                              data_dir=prepared, splits={"train": "train[:10]"})
    ds = seqio.get_mixture_or_task(name).get_dataset({"inputs": 16, "targets": 16}, split="train",
                                                      shuffle=False)
    rows = list(ds.as_numpy_iterator())
    assert len(rows) == 10
    lid = language_token_id(get_vocabulary(vocab), "de")
    assert all(r["inputs"][0] == lid and r["targets"][-1] == 1 for r in rows)


def test_errors_for_missing_keys_splits_and_unprepared(prepared, vocab, tmp_path):
    from mnmt.data.sources.tfds import register_tfds_task

    with pytest.raises(ValueError, match="no target feature 'fr'"):
        register_tfds_task("x1", "mnmt_tiny_translate", "en-fr", vocab, data_dir=prepared)
    with pytest.raises(ValueError, match="split 'test'"):
        register_tfds_task("x2", "mnmt_tiny_translate", "en-de", vocab, data_dir=prepared,
                           splits={"test": "test"})
    with pytest.raises(FileNotFoundError, match="not prepared"):
        register_tfds_task("x3", "mnmt_tiny_translate", "en-de", vocab, data_dir=str(tmp_path))


def test_an_empty_split_is_an_error(prepared, vocab):
    from mnmt.data.sources.tfds import register_tfds_task

    with pytest.raises(ValueError, match=r"split 'train\[:0\]' is empty"):
        register_tfds_task("x4", "mnmt_tiny_translate", "en-de", vocab, data_dir=prepared,
                           splits={"train": "train[:0]"})


def test_wmt19_module_registers_en_to_xx_tasks_under_its_names(prepared, vocab):
    from mnmt.data.pipeline import eval_examples
    from mnmt.data.sources import wmt19

    tasks = wmt19.register_study_tasks(vocab, data_dir=prepared, pairs=("en-de",),
                                       datasets={"en-de": "mnmt_tiny_translate"})
    assert tasks == {"en-de": "wmt19_en_de"}
    assert sorted(eval_examples("wmt19_en_de", "validation")) == sorted(PAIRS[24:30])
    with pytest.raises(ValueError, match="'en-fr'"):
        wmt19.register_study_tasks(vocab, pairs=("en-fr",))


def test_a_study_calls_its_task_module_with_the_study_vocabulary(prepared, vocab, tmp_path,
                                                                  monkeypatch):
    import sys
    import types

    from mnmt.data.sources import wmt19
    from mnmt.study import stages
    from mnmt.study.spec import StudySpec

    seen = []

    def register_study_tasks(vocabulary_path):
        seen.append(vocabulary_path)
        wmt19.register_study_tasks(vocabulary_path, data_dir=prepared, pairs=("en-de",),
                                   datasets={"en-de": "mnmt_tiny_translate"})

    module = types.ModuleType("my_study_tasks")
    module.register_study_tasks = register_study_tasks
    monkeypatch.setitem(sys.modules, "my_study_tasks", module)
    spec = StudySpec.of(pairs=("en-de",), weights=((1.0,),), tasks=(("en-de", "wmt19_en_de"),),
                     task_module="my_study_tasks", vocabulary_path=vocab)
    data = stages.prepare_data(spec, tmp_path, lambda text: None)
    assert seen == [vocab] and data.tasks == {"en-de": "wmt19_en_de"}
    # the real module without prepared WMT19: one clear line naming the dataset
    spec = StudySpec.of(pairs=("en-de",), weights=((1.0,),), tasks=(("en-de", "wmt19_en_de"),),
                     task_module="mnmt.data.sources.wmt19", vocabulary_path=vocab)
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "empty"))
    with pytest.raises(stages.UsageError, match="wmt19_translate/de-en.*not prepared"):
        stages.prepare_data(spec, tmp_path, lambda text: None)
