"""Real human-translated text available offline: gettext ``.mo`` catalogs as parallel data.

A catalog ``<locale_dir>/<lang>/LC_MESSAGES/<domain>.mo`` maps English source strings (msgid)
to their translation (msgstr). ``en-xx`` pairs read msgid → msgstr, ``xx-en`` the reverse, and
``xx-yy`` pivots through the shared msgid of one domain. Small (a Debian base system has a few
thousand strings per language) but real: useful for demos and tests on real language.

Catalogs come with packages: on Debian/Ubuntu ``iso-codes`` (language, country and script names
in ~100 languages — the largest clean source), ``coreutils``, ``bash``, ``grep``, ``findutils``,
``diffutils``, ``tar``, ``apt``, ``dpkg``, ``wget``, ``gettext``, ``libc-bin`` (glibc, via
``locales``), ``systemd``, ``postgresql-*``; ``language-pack-<lang>`` (Ubuntu) adds many more.
Images built with ``path-exclude=/usr/share/locale/*`` in dpkg's config have none.
"""

from __future__ import annotations

import gettext
import hashlib
import logging
import os
import re
from collections.abc import Iterable, Mapping

__all__ = [
    "DEFAULT_LOCALE_DIR",
    "load_catalog",
    "find_catalogs",
    "gettext_pairs",
    "register_gettext_task",
]

DEFAULT_LOCALE_DIR = "/usr/share/locale"
log = logging.getLogger(__name__)
_PLACEHOLDER = re.compile(r"%[-+ #0-9.]*[a-zA-Z]|\{[^}]*\}|\\[ntr]")


def load_catalog(path: str, *, min_chars: int = 2) -> dict[str, str]:
    """msgid → msgstr of one ``.mo`` file: singular entries with a non-empty translation,
    whitespace-normalised, without the header, context-qualified or format-only strings."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"gettext catalog not found: {path}")
    try:
        with open(path, "rb") as f:
            cat = gettext.GNUTranslations(f)._catalog  # parsed by the standard library
    except Exception as e:  # bad magic (OSError), struct or unicode errors  # struct/unicode errors from a corrupt catalog
        raise ValueError(f"{path}: not a valid .mo catalog ({e})") from e
    out: dict[str, str] = {}
    for key, value in cat.items():
        if not isinstance(key, str) or not key or "\x04" in key:  # plural tuples, header, msgctxt
            continue
        src = " ".join(key.split())
        tgt = " ".join(str(value).split())
        if not tgt or tgt == src:
            continue
        if len(_PLACEHOLDER.sub("", src).strip()) < min_chars:
            continue
        out[src] = tgt
    return out


def find_catalogs(
    locale_dir: str = DEFAULT_LOCALE_DIR, languages: Iterable[str] | None = None
) -> dict[str, dict[str, str]]:
    """{language: {domain: path}} of the ``.mo`` files under ``locale_dir``.

    A language is the locale directory name up to ``_``/``@`` (``pt_BR`` → ``pt``; the plain
    ``pt`` directory wins over regional ones for the same domain).
    """
    if not os.path.isdir(locale_dir):
        raise FileNotFoundError(f"locale directory not found: {locale_dir}")
    wanted = set(languages) if languages is not None else None
    out: dict[str, dict[str, str]] = {}
    for loc in sorted(os.listdir(locale_dir)):
        lang = re.split(r"[_@.]", loc)[0].lower()
        if wanted is not None and lang not in wanted:
            continue
        d = os.path.join(locale_dir, loc, "LC_MESSAGES")
        if not os.path.isdir(d):
            continue
        for fn in sorted(os.listdir(d)):
            if fn.endswith(".mo"):
                domain = fn[:-3]
                slot = out.setdefault(lang, {})
                if domain not in slot or loc == lang:
                    slot[domain] = os.path.join(d, fn)
    return out


def gettext_pairs(
    pair: str,
    locale_dir: str = DEFAULT_LOCALE_DIR,
    domains: Iterable[str] | None = None,
    *,
    strict: bool = False,
) -> list[tuple[str, str]]:
    """Deduplicated (source, target) pairs for ``pair`` from all (or the given) domains.

    Catalogs the standard library cannot parse are skipped and logged (an error if ``strict``).
    """
    src, _, tgt = pair.partition("-")
    if not src or not tgt or src == tgt:
        raise ValueError(f"pair {pair!r}: expected 'src-tgt' with two different languages")
    cats = find_catalogs(locale_dir, [c for c in (src, tgt) if c != "en"])
    for lang in (src, tgt):
        if lang != "en" and lang not in cats:
            raise ValueError(
                f"no gettext catalogs for language {lang!r} under {locale_dir} (have "
                f"{len(cats)} languages); install packages that ship translations (see docs)"
            )
    wanted = set(domains) if domains is not None else None
    seen: set[tuple[str, str]] = set()
    out: list[tuple[str, str]] = []
    skipped: list[str] = []
    langs = [c for c in (src, tgt) if c != "en"]
    common = set.intersection(*(set(cats[c]) for c in langs))
    for domain in sorted(common):
        if wanted is not None and domain not in wanted:
            continue
        try:
            tables = {c: load_catalog(cats[c][domain]) for c in langs}
        except ValueError as e:  # e.g. a legacy non-UTF-8 catalog (net-tools in Debian 12)
            if strict:
                raise
            skipped.append(str(e))
            continue
        for msgid in sorted(set.intersection(*(set(t) for t in tables.values()))):
            side = {"en": msgid, **{c: tables[c][msgid] for c in langs}}
            item = (side[src], side[tgt])
            if item not in seen:
                seen.add(item)
                out.append(item)
    if skipped:
        log.warning("gettext %s: skipped %d unreadable catalog(s): %s", pair, len(skipped), skipped)
    if not out:
        raise ValueError(f"gettext catalogs under {locale_dir} give no {pair} pairs"
                         + (f" in domains {sorted(wanted)}" if wanted else ""))
    return out


def _bucket(text: str) -> float:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") / 2**64


def register_gettext_task(
    name: str,
    pair: str,
    vocab_path: str,
    *,
    locale_dir: str = DEFAULT_LOCALE_DIR,
    domains: Iterable[str] | None = None,
    heldout: Mapping[str, float] | None = None,
) -> str:
    """Register a task over gettext catalogs; ``validation`` / ``test`` take fixed fractions
    (default 5% each) chosen by a hash of the source string, ``train`` the rest."""
    from mnmt.data.tasks import register_text_task

    fractions = dict(heldout or {"validation": 0.05, "test": 0.05})
    if any(not 0 <= f < 1 for f in fractions.values()) or sum(fractions.values()) >= 1:
        raise ValueError(f"heldout fractions must be in [0, 1) and sum below 1, got {fractions}")
    pairs = gettext_pairs(pair, locale_dir, domains)
    splits: dict[str, list[tuple[str, str]]] = {"train": [], **{k: [] for k in fractions}}
    for s, t in pairs:
        u = _bucket(s)
        acc = 0.0
        dest = "train"
        for k, f in fractions.items():
            acc += f
            if u < acc:
                dest = k
                break
        splits[dest].append((s, t))
    empty = [k for k, v in splits.items() if not v]
    if empty:
        raise ValueError(f"gettext task {name!r}: splits {empty} are empty ({len(pairs)} pairs)")
    return register_text_task(
        name, pair, vocab_path, {k: (lambda v=v: iter(v)) for k, v in splits.items()},
        split_sizes={k: len(v) for k, v in splits.items()},
        definition={"kind": "gettext", "locale_dir": locale_dir,
                    "domains": sorted(domains) if domains is not None else None,
                    "heldout": fractions, "n": len(pairs)},
    )
