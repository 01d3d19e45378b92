"""gettext catalogs as parallel data, on .mo files the test writes itself."""

import os
import struct

import pytest

from mnmt.data.sources.gettext import (
    find_catalogs,
    gettext_pairs,
    load_catalog,
    register_gettext_task,
)


def write_mo(path, entries: dict, charset="UTF-8"):
    """Minimal GNU .mo writer (format: magic, revision, N, offsets of key / value tables)."""
    header = f"Content-Type: text/plain; charset={charset}\n"
    items = sorted({"": header, **entries}.items())
    keys = [k.encode(charset) for k, _ in items]
    vals = [v.encode(charset) for _, v in items]
    n = len(items)
    ko = 7 * 4
    vo = ko + n * 8
    data_start = vo + n * 8
    kdata = b"".join(k + b"\0" for k in keys)
    vdata = b"".join(v + b"\0" for v in vals)
    ktab, off = [], data_start
    for k in keys:
        ktab += [len(k), off]
        off += len(k) + 1
    vtab = []
    for v in vals:
        vtab += [len(v), off]
        off += len(v) + 1
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<7I", 0x950412DE, 0, n, ko, vo, 0, 0))
        f.write(struct.pack(f"<{2 * n}I", *ktab))
        f.write(struct.pack(f"<{2 * n}I", *vtab))
        f.write(kdata + vdata)


DE = {f"Open file {i}": f"Datei {i} öffnen" for i in range(60)} | {"%s": "%s", "Quit": "Beenden"}
FR = {f"Open file {i}": f"Ouvrir le fichier {i}" for i in range(60)}


@pytest.fixture(scope="module")
def locale_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("locale")
    write_mo(d / "de" / "LC_MESSAGES" / "app.mo", DE)
    write_mo(d / "de_AT" / "LC_MESSAGES" / "app.mo", {"Quit": "Aus"})
    write_mo(d / "fr" / "LC_MESSAGES" / "app.mo", FR)
    (d / "fr" / "LC_MESSAGES" / "broken.mo").write_bytes(b"\x00" * 40)
    return str(d)


def test_catalog_filters_header_and_format_only_strings(locale_dir):
    cat = load_catalog(os.path.join(locale_dir, "de", "LC_MESSAGES", "app.mo"))
    assert cat["Quit"] == "Beenden" and "" not in cat and "%s" not in cat
    assert find_catalogs(locale_dir)["de"]["app"].endswith(os.path.join("de", "LC_MESSAGES", "app.mo"))


def test_directions_and_pivot(locale_dir):
    ende = gettext_pairs("en-de", locale_dir)
    assert ("Quit", "Beenden") in ende and len(ende) == 61
    assert ("Beenden", "Quit") in gettext_pairs("de-en", locale_dir)
    defr = gettext_pairs("de-fr", locale_dir)  # pivot through the shared English msgid
    assert ("Datei 3 öffnen", "Ouvrir le fichier 3") in defr and len(defr) == 60
    with pytest.raises(ValueError, match="no gettext catalogs for language 'xx'"):
        gettext_pairs("en-xx", locale_dir)
    with pytest.raises(ValueError, match="not a valid .mo"):
        gettext_pairs("en-fr", locale_dir, strict=True)


def test_register_gettext_task_has_disjoint_splits(locale_dir, tmp_path):
    from mnmt.data.pipeline import eval_examples
    from mnmt.data.vocab import train_vocabulary

    texts = [t for p in gettext_pairs("en-de", locale_dir) for t in p]
    vocab = train_vocabulary(texts, str(tmp_path), 80, languages=["de"])
    name = register_gettext_task("gt_en_de", "en-de", vocab, locale_dir=locale_dir,
                                 heldout={"validation": 0.2})
    train, val = eval_examples(name, "train"), eval_examples(name, "validation")
    assert len(train) + len(val) == 61 and val
    assert not {s for s, _ in train} & {s for s, _ in val}


@pytest.mark.skipif(not os.path.isdir("/usr/share/locale/de/LC_MESSAGES"), reason="no system catalogs")
def test_system_catalogs_give_real_pairs():
    pairs = gettext_pairs("en-de")
    assert len(pairs) > 100


def test_empty_sources_are_errors(locale_dir):
    with pytest.raises(ValueError, match=r"give no en-de pairs in domains \['nope'\]"):
        gettext_pairs("en-de", locale_dir, domains=["nope"])
    # 61 pairs cannot fill a 0.1% held-out split: an error, not an empty evaluation set
    with pytest.raises(ValueError, match=r"splits \['validation'\] are empty \(61 pairs\)"):
        register_gettext_task("gt_empty", "en-de", "unused.model", locale_dir=locale_dir,
                              heldout={"validation": 0.001})
    with pytest.raises(ValueError, match="sum below 1"):
        register_gettext_task("gt_bad", "en-de", "unused.model", locale_dir=locale_dir,
                              heldout={"validation": 0.6, "test": 0.5})
