"""gettext languages as written varieties, closest-name errors, caps and the catalog manifest,
on .mo catalogs written into tmp_path (independent of the machine's /usr/share/locale)."""

from __future__ import annotations

import os

import pytest

from mnmt.data.sources.gettext import (
    canonical_pair,
    catalog_manifest,
    find_catalogs,
    gettext_pairs,
    manifest_changes,
    register_gettext_task,
    variety_code,
    write_catalog,
)

WORDS = [f"Open file {i}" for i in range(40)]


def _write(root, loc: str, domain: str, fmt: str, words=WORDS) -> None:
    write_catalog(os.path.join(root, loc, "LC_MESSAGES", f"{domain}.mo"),
                  {w: fmt.format(w) for w in words})


@pytest.fixture()
def locale_dir(tmp_path):
    root = str(tmp_path / "locale")
    _write(root, "de", "app", "DE {}")
    _write(root, "de_CH", "app", "CH {}")  # the plain directory wins this domain
    _write(root, "de_CH", "extra", "CH extra {}", WORDS[:5])  # fills a domain de lacks
    _write(root, "zh_CN", "app", "简 {}")
    _write(root, "zh_TW", "app", "繁 {}")
    _write(root, "pt", "app", "PT {}")
    _write(root, "pt_BR", "app", "BR {}")
    _write(root, "sr", "app", "СР {}")
    _write(root, "sr@latin", "app", "SR {}")
    return root


def test_codes_are_lower_case_with_modifiers_as_underscores():
    assert variety_code("zh_CN") == "zh_cn" and variety_code("sr@latin") == "sr_latin"
    assert variety_code("de_DE.UTF-8") == "de_de"
    assert canonical_pair("en-zh_CN") == "en-zh_cn"
    with pytest.raises(ValueError, match="expected 'src-tgt'"):
        canonical_pair("en")


def test_every_directory_is_a_language_and_same_variety_regions_fill_in(locale_dir):
    cats = find_catalogs(locale_dir)
    assert {"de", "de_ch", "zh_cn", "zh_tw", "pt", "pt_br", "sr", "sr_latin"} <= set(cats)
    assert "zh" not in cats  # Chinese varieties are never folded
    assert cats["de"]["app"].endswith(os.path.join("de", "LC_MESSAGES", "app.mo"))
    assert cats["de"]["extra"].endswith(os.path.join("de_CH", "LC_MESSAGES", "extra.mo"))
    assert set(cats["de_ch"]) == {"app", "extra"}
    assert cats["pt"]["app"].endswith(os.path.join("pt", "LC_MESSAGES", "app.mo"))
    assert set(find_catalogs(locale_dir, ["zh_CN"])) == {"zh_cn"}


def test_pairs_of_a_variety_read_its_own_directory(locale_dir):
    assert gettext_pairs("en-zh_CN", locale_dir)[0] == ("Open file 0", "简 Open file 0")
    assert gettext_pairs("en-zh_tw", locale_dir)[0][1].startswith("繁")
    assert {t[:2] for _, t in gettext_pairs("en-pt_BR", locale_dir)} == {"BR"}
    assert {t[:2] for _, t in gettext_pairs("en-pt", locale_dir)} == {"PT"}
    assert {t[:2] for _, t in gettext_pairs("en-sr", locale_dir)} == {"СР"}
    assert {t[:2] for _, t in gettext_pairs("en-sr@latin", locale_dir)} == {"SR"}
    de = gettext_pairs("en-de", locale_dir)
    assert len(de) == 45 and ("Open file 0", "CH extra Open file 0") in de


def test_plain_code_of_a_language_with_varieties_is_refused(locale_dir):
    with pytest.raises(ValueError, match=r"'zh' has several written varieties .*zh_cn, zh_tw; "
                                         r"name one, e.g. 'en-zh_cn'"):
        gettext_pairs("en-zh", locale_dir)


def test_unknown_code_names_the_closest_and_the_available(locale_dir):
    with pytest.raises(ValueError, match=r"no gettext catalogs for language 'zz' under .*; "
                                         r"closest: .*; available \(8\): de, de_ch"):
        gettext_pairs("en-zz", locale_dir)
    with pytest.raises(ValueError, match=r"language 'zh_cm'.*closest: zh_cn"):
        gettext_pairs("en-zh_cm", locale_dir)


def test_manifest_digest_follows_the_catalogs(locale_dir, tmp_path):
    first = catalog_manifest(["en-de", "en-zh_CN"], locale_dir)
    assert set(first["pairs"]) == {"en-de", "en-zh_cn"}
    de = first["pairs"]["en-de"]
    assert de["pairs"] == 45
    assert {(c["language"], c["domain"]) for c in de["catalogs"]} == {("de", "app"), ("de", "extra")}
    assert all(len(c["sha256"]) == 64 and c["size"] > 0 for c in de["catalogs"])
    assert catalog_manifest(["en-de", "en-zh_CN"], locale_dir) == first
    assert manifest_changes(first, first) == []
    _write(locale_dir, "de", "app", "DE2 {}")  # same pair count, other text
    second = catalog_manifest(["en-de", "en-zh_CN"], locale_dir)
    assert second["digest"] != first["digest"]
    assert second["pairs"]["en-zh_cn"] == first["pairs"]["en-zh_cn"]
    changes = manifest_changes(first, second)
    assert len(changes) == 1 and changes[0].startswith("en-de: 45 → 45 pairs; catalogs differ: "
                                                       + os.path.join("de", "LC_MESSAGES", "app.mo"))


def test_cap_keeps_a_fixed_subset_and_refuses_more_than_available(locale_dir, tmp_path):
    from mnmt.data.tasks import get_task_info
    from mnmt.data.vocab_sample import placeholder_vocabulary

    vocab = placeholder_vocabulary(["de", "zh_cn"], str(tmp_path))
    held = {"validation": 0.2}
    small = get_task_info(register_gettext_task("gtv_small", "en-zh_CN", vocab, heldout=held,
                                                locale_dir=locale_dir, cap=10))
    large = get_task_info(register_gettext_task("gtv_large", "en-zh_CN", vocab, heldout=held,
                                                locale_dir=locale_dir, cap=20))
    assert small.pair == "en-zh_cn" and small.train_size == 10 and large.train_size == 20
    assert set(small.text_stream("train")) <= set(large.text_stream("train"))
    assert len(small.definition["catalogs"]) == 64
    with pytest.raises(ValueError, match=r"gettext en-zh_cn: cap 1,000 is more than the \d+ "
                                         "training pairs available"):
        register_gettext_task("gtv_big", "en-zh_CN", vocab, locale_dir=locale_dir, cap=1000,
                              heldout=held)
