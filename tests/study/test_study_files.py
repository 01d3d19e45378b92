"""The shipped study files: each loads, names real sizes, plans, and is listed by `mnmt-study
presets`; paper-scale files name their public stand-in; caps reach the task module."""

from __future__ import annotations

import types

import pytest

from mnmt.data.sources import wmt
from mnmt.models import zoo
from mnmt.study import cli, stages
from mnmt.study.spec import expand, with_branches

FILES = stages.study_files()
# Each paper's experiments: the paper-scale files and their CPU miniatures.
PAPERS = {
    "fernandes": (["fernandes-en-de-zh", "fernandes-en-de-fr", "fernandes-de-zh-en",
                   "fernandes-en-de-fr-zh"],
                  ["cpu-default", "cpu-fernandes-en-de-fr", "cpu-fernandes-de-zh-en",
                   "cpu-fernandes-3pair"]),
    "chen": (["chen-2dir", "chen-4dir"], ["cpu-chen-2dir", "cpu-chen-4dir"]),
    "ghorbani": (["ghorbani-encoder-scaling", "ghorbani-decoder-scaling", "ghorbani-symmetric",
                  "ghorbani-depths"], ["cpu-ghorbani-depths"]),
    "caillaut": (["caillaut-decoder-only"], ["cpu-caillaut-decoder-only"]),
}
# Studies beyond the papers: K-pair mixture designs on the synthetic family and on gettext
# catalogs, and a size ladder on gettext (real text).
BEYOND = ["cpu-many-pairs", "cpu-gettext", "cpu-gettext-sizes"]


def test_every_paper_experiment_has_its_files():
    named = {name for paper, cpu in PAPERS.values() for name in paper + cpu} | set(BEYOND)
    assert named == set(FILES), f"unlisted or missing study files: {named ^ set(FILES)}"


@pytest.mark.parametrize("name", sorted(FILES))
def test_study_file_loads_and_names_real_sizes(name):
    spec = stages.load_spec(None, name, [])
    assert spec.name == name
    runs = expand(spec)
    assert runs and len({r.run_id for r in runs}) == len(runs)
    for size in {r.size for r in runs}:
        zoo.get_config(size)  # raises for a size the zoo does not know
    text = FILES[name].read_text(encoding="utf-8")
    assert stages.study_summary(FILES[name]), f"{name}: no summary line"
    if spec.tasks:  # paper scale: Chen's data is WMT itself, the others' a public stand-in
        assert ("WMT" in text) if name.startswith("chen") else ("stand-in" in text)
        if spec.task_module == "mnmt.data.sources.wmt":
            assert dict(spec.tasks) == {pair: wmt.task_name(pair) for pair in spec.pairs}
            for pair in spec.pairs:
                wmt.dataset_of(pair)
    else:  # a CPU miniature on the synthetic family
        assert name.startswith("cpu-")


@pytest.mark.parametrize("name", sorted(FILES))
def test_plan_lists_every_run(name, capsys):
    assert cli.main(["plan", "--preset", name]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    spec = stages.load_spec(None, name, [])
    assert len(lines) == len(with_branches(spec, expand(spec)))  # runs and cool-down branches


def test_presets_lists_built_ins_and_files(capsys):
    assert cli.main(["presets"]) == 0
    rows = {line.split("\t")[0]: line.split("\t") for line in capsys.readouterr().out.splitlines()}
    # the default preset is the study file cpu_default.gin: one line, naming its alias
    assert set(rows) == {"default", "ci"} | set(FILES) - {"cpu-default"}
    assert rows["default"][-1].endswith("(alias: cpu-default)")
    assert rows["chen-2dir"][1] == "paper" and rows["cpu-chen-2dir"][1] == "cpu"
    assert rows["cpu-chen-2dir"][-1] == stages.study_summary(FILES["cpu-chen-2dir"])
    # 7 weights + 5 temperatures on one size
    assert rows["cpu-chen-2dir"][2] == "12 runs" and rows["cpu-chen-2dir"][4] == "mixtures=12"


def test_unknown_preset_suggests_a_study_file():
    with pytest.raises(stages.UsageError, match="did you mean 'cpu-chen-2dir'"):
        stages.load_spec(None, "cpu-chen-2-dir", [])


def test_caps_reach_the_task_module(monkeypatch):
    spec = stages.load_spec(None, "chen-2dir", [])
    assert stages.study_task_arguments(spec, wmt.register_study_tasks) == {
        "pairs": ("en-fr", "en-de"), "caps": {"en-fr": 10_000_000, "en-de": 260_000}}

    def no_caps(vocabulary_path, pairs=()):
        return {}

    with pytest.raises(stages.UsageError, match="takes no caps"):
        stages.study_task_arguments(spec, no_caps)


def test_wmt_registers_capped_splits(monkeypatch):
    calls = []
    fake = types.SimpleNamespace(register_tfds_task=lambda name, dataset, pair, vocab, **kw:
                                 calls.append((name, dataset, pair, kw["splits"])) or name)
    monkeypatch.setitem(__import__("sys").modules, "mnmt.data.sources.tfds", fake)
    names = wmt.register_study_tasks("v.model", pairs=("en-fr", "de-en"), caps={"en-fr": 1000})
    assert names == {"en-fr": "wmt_en_fr", "de-en": "wmt_de_en"}
    assert calls == [
        ("wmt_en_fr", "wmt14_translate/fr-en", "en-fr", {"train": "train[:1000]",
                                                         "validation": "validation"}),
        ("wmt_de_en", "wmt19_translate/de-en", "de-en", {"train": "train",
                                                         "validation": "validation"}),
    ]
    with pytest.raises(ValueError, match="not offered"):
        wmt.register_study_tasks("v.model", pairs=("en-ja",))
    with pytest.raises(ValueError, match="not in pairs"):
        wmt.register_study_tasks("v.model", pairs=("en-de",), caps={"en-fr": 5})
    with pytest.raises(ValueError, match="positive number"):
        wmt.register_study_tasks("v.model", pairs=("en-de",), caps={"en-de": 0})


def _documented_study_fields() -> set[str]:
    """Every `StudySpec.FIELD` that README.md, docs/ and the shipped gin files name."""
    import re

    root = stages.repo_root()
    texts = [root / "README.md", *sorted((root / "docs").rglob("*.md")),
             *sorted((root / "t5x_configs").rglob("*.gin"))]
    return {m for path in texts for m in re.findall(r"StudySpec\.([a-z_]+)", path.read_text())}


def test_every_study_path_users_write_is_a_field():
    """The gin paths README, docs and the study files write (`StudySpec.train_steps = 2800`)
    are fields of StudySpec, whichever section declares them."""
    from mnmt.study.spec import StudySpec, field_names

    named = {n for n in _documented_study_fields() if not callable(getattr(StudySpec, n, None))}
    assert len(named) > 50  # the scan reads the files (StudySpec.of, a method, left out)
    assert named <= set(field_names())
