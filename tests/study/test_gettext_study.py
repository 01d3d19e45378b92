"""A study's data stage on gettext catalogs written into tmp_path: vocabulary, tasks, caps and
the catalog manifest (recorded, matched, and a changed catalog set refused)."""

from __future__ import annotations

import json
import os

import pytest

from mnmt.data.sources.gettext import write_catalog
from mnmt.study import gettext_data, stages
from mnmt.study.spec import StudySpec

WORDS = [f"Open the file number {i} now" for i in range(120)]


def _write(root, loc: str, fmt: str, domain: str = "app") -> None:
    write_catalog(os.path.join(root, loc, "LC_MESSAGES", f"{domain}.mo"),
                  {w: fmt.format(w) for w in WORDS})


@pytest.fixture()
def locale_dir(tmp_path):
    root = str(tmp_path / "locale")
    _write(root, "de", "Datei {} öffnen")
    _write(root, "zh_CN", "打开 {}")
    return root


def _spec(locale_dir, **fields) -> StudySpec:
    base = dict(name="gt-test", data_preset=f"gettext:{locale_dir}", pairs=("en-de", "en-zh_cn"),
                data_caps=(("en-de", 80), ("en-zh_cn", 50)), vocab_size=120, cache_data=False,
                sizes=("micro-1",), weights=((0.5, 0.5),))
    return StudySpec().replace(**(base | fields))


def test_data_stage_writes_vocabulary_manifest_and_capped_tasks(locale_dir, tmp_path):
    from mnmt.data.tasks import get_task_info

    out = tmp_path / "out"
    lines: list[str] = []
    data = stages.prepare_data(_spec(locale_dir), out, lines.append)
    assert (out / "data" / "spm.model").exists() and data.irreducible_loss == {}
    assert data.tasks == {"en-de": "gettext_en_de_d80", "en-zh_cn": "gettext_en_zh_cn_d50"}
    assert data.caps == {"en-de": 80, "en-zh_cn": 50}
    info = get_task_info(data.tasks["en-zh_cn"])
    assert info.vocab_path == str(out / "data" / "spm.model") and info.train_size == 50
    manifest = json.loads((out / "data" / gettext_data.MANIFEST_FILE).read_text())
    assert set(manifest["pairs"]) == {"en-de", "en-zh_cn"} and len(manifest["digest"]) == 64
    assert any("recorded in" in line for line in lines)
    vocab_time = os.stat(out / "data" / "spm.model").st_mtime_ns
    lines.clear()
    stages.prepare_data(_spec(locale_dir), out, lines.append)  # identical catalogs: proceeds
    assert any("as recorded" in line for line in lines)
    assert os.stat(out / "data" / "spm.model").st_mtime_ns == vocab_time


def test_changed_catalogs_are_refused_until_the_manifest_is_removed(locale_dir, tmp_path):
    out = tmp_path / "out"
    stages.prepare_data(_spec(locale_dir), out, lambda text: None)
    _write(locale_dir, "de", "Die Datei {} öffnen")  # a package upgrade
    with pytest.raises(stages.UsageError, match=r"gettext_manifest.json: the gettext catalogs "
                       r"under .* differ .* en-de: 120 → 120 pairs; catalogs differ: "
                       r"de/LC_MESSAGES/app.mo\. .*remove gettext_manifest.json"):
        stages.prepare_data(_spec(locale_dir), out, lambda text: None)
    os.remove(out / "data" / gettext_data.MANIFEST_FILE)  # the explicit override
    stages.prepare_data(_spec(locale_dir), out, lambda text: None)
    manifest = json.loads((out / "data" / gettext_data.MANIFEST_FILE).read_text())
    assert manifest["pairs"]["en-de"]["catalogs"][0]["sha256"] != ""


def test_caps_above_the_data_and_non_canonical_pairs_are_errors(locale_dir, tmp_path):
    with pytest.raises(stages.UsageError, match=r"gettext en-zh_cn: cap 500 is more than the "
                                                r"\d+ training pairs available"):
        stages.prepare_data(_spec(locale_dir, data_caps=(("en-zh_cn", 500),)), tmp_path / "a",
                            lambda text: None)
    assert not (tmp_path / "a" / "data" / "spm.model").exists()
    with pytest.raises(stages.UsageError, match=r"StudySpec.pairs: 'en-zh_CN': write 'en-zh_cn'"):
        stages.prepare_data(_spec(locale_dir, pairs=("en-de", "en-zh_CN"), data_caps=()),
                            tmp_path / "b", lambda text: None)
    with pytest.raises(stages.UsageError, match=r"'zh' has several written varieties"):
        stages.prepare_data(_spec(locale_dir, pairs=("en-zh",), data_caps=(), weights=((1.0,),)),
                            tmp_path / "c", lambda text: None)


def test_shipped_gettext_study_plans_without_catalogs(capsys):
    from mnmt.study import cli

    assert cli.main(["plan", "--preset", "cpu-gettext"]) == 0
    spec = stages.load_spec(None, "cpu-gettext", [])
    assert gettext_data.is_gettext_preset(spec.data_preset)
    assert "en-hi" in spec.pairs and set(dict(spec.data_caps)) == set(spec.pairs)
    assert len(capsys.readouterr().out.strip().splitlines()) > 10
