"""Real human-translated text available offline: gettext ``.mo`` catalogs as parallel data.

A catalog ``<locale_dir>/<locale>/LC_MESSAGES/<domain>.mo`` maps English source strings (msgid)
to their translation (msgstr). ``en-xx`` pairs read msgid → msgstr, ``xx-en`` the reverse, and
``xx-yy`` pivots through the shared msgid of one domain. Small (a Debian base system has a few
thousand strings per language) but real: useful for demos, tests and small studies on real
language.

**Languages are written varieties.** Every locale directory is a language of its own, named by
its directory name in lower case with ``@`` written ``_`` (``zh_CN`` → ``zh_cn``, ``pt_BR`` →
``pt_br``, ``sr@latin`` → ``sr_latin``; pairs may use either spelling: ``en-zh_CN`` is
``en-zh_cn``). The canonical (lower-case) code is the task's language token (``<2zh_cn>``).
A plain code (``de``) is the plain directory, and where the language has one written standard
its regional directories fill in the domains the plain one lacks (``de`` + ``de_CH``, ``fr`` +
``fr_CA``, ``pt`` + ``pt_PT``; the plain directory wins for a domain both have). Regional
spelling differences of such languages (Swiss ``ss`` for ``ß``) are left in, as before.
Never folded into a plain code:

- directories with a modifier (``sr@latin``, ``be@latin``, ``ca@valencia``, ``uz@cyrillic``,
  ``en@quot``): another script or orthography;
- the regions of :data:`SEPARATE_VARIETIES`: Chinese (every ``zh_*``: Simplified ``zh_CN`` /
  ``zh_SG`` / ``zh_Hans``, Traditional ``zh_TW`` / ``zh_HK`` / ``zh_Hant``), Brazilian
  Portuguese ``pt_BR``, Punjabi in Shahmukhi ``pa_PK``, Azerbaijani in Arabic script ``az_IR``,
  every ``sr_*`` and every ``en_*`` (``en`` itself is the msgid side).

A plain code with no directory of its own whose language has several written varieties
(``zh`` on Debian/Ubuntu) is refused with the list of varieties to choose from; an unknown code
is refused with the closest available codes (difflib) and the full list.

:func:`catalog_manifest` records which catalog files (path, domain, size, sha256) give each pair
and how many pairs they give, with a digest of the whole, so a study can tell whether another
machine (or a later package upgrade) has the same data.

Catalogs come with packages: on Debian/Ubuntu ``iso-codes`` (language, country and script names
in ~100 languages — the largest clean source), ``coreutils``, ``bash``, ``grep``, ``findutils``,
``diffutils``, ``tar``, ``apt``, ``dpkg``, ``wget``, ``gettext``, ``libc-bin`` (glibc, via
``locales``), ``systemd``, ``postgresql-*``; ``language-pack-<lang>`` (Ubuntu) adds many more.
Images built with ``path-exclude=/usr/share/locale/*`` in dpkg's config have none.
"""

from __future__ import annotations

import difflib
import functools
import gettext
import hashlib
import json
import logging
import os
import re
import struct
from collections.abc import Iterable, Mapping, Sequence

from fitting.data import io
from mnmt.data.sources.parts import ListParts, attach

__all__ = [
    "DEFAULT_LOCALE_DIR",
    "SEPARATE_VARIETIES",
    "load_catalog",
    "variety_code",
    "canonical_pair",
    "find_catalogs",
    "gettext_pairs",
    "catalog_manifest",
    "manifest_changes",
    "register_gettext_task",
    "write_catalog",
]

DEFAULT_LOCALE_DIR = "/usr/share/locale"
MANIFEST_FORMAT = 1
log = logging.getLogger(__name__)
_PLACEHOLDER = re.compile(r"%[-+ #0-9.]*[a-zA-Z]|\{[^}]*\}|\\[ntr]")
_WARNED: set[tuple[str, tuple[str, ...]]] = set()
_REGIONAL = re.compile(r"^([a-z]{2,3})_([a-z0-9]+)$")

# Languages whose regional (or script-tagged) directories are written varieties of their own:
# language -> the regions never folded into the plain code (None: every region).
SEPARATE_VARIETIES: dict[str, frozenset[str] | None] = {
    "zh": None,  # Simplified (zh_CN, zh_SG, zh_Hans) and Traditional (zh_TW, zh_HK, zh_Hant)
    "pt": frozenset({"br"}),  # Brazilian against European orthography and vocabulary
    "pa": frozenset({"pk"}),  # Shahmukhi (Arabic) script against Gurmukhi
    "az": frozenset({"ir"}),  # Arabic script against Latin
    "sr": None,  # Cyrillic and Latin standards; regional norms (ijekavian) differ too
    "en": None,  # en is the msgid side: en_GB, en_AU … are targets of their own
}


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


def _version(path: str) -> tuple[int, int, int]:
    """What tells two versions of a file apart for the caches below: inode, mtime, size."""
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, st.st_size


def _cached_catalog(path: str) -> dict[str, str]:
    """:func:`load_catalog`, remembered per file version (a study reads each catalog for its
    manifest, its task and every worker's registration). Callers must not modify the result."""
    return _load_version(path, _version(path))


@functools.lru_cache(maxsize=512)
def _load_version(path: str, version: tuple[int, int, int]) -> dict[str, str]:
    del version  # part of the cache key only
    return load_catalog(path)


def write_catalog(path: str, entries: Mapping[str, str], charset: str = "UTF-8") -> None:
    """Write a GNU ``.mo`` catalog of msgid → msgstr ``entries`` (what ``msgfmt`` makes from a
    ``.po`` file; no plurals or contexts), atomically: for tests and hand-made corpora."""
    items = sorted({"": f"Content-Type: text/plain; charset={charset}\n", **entries}.items())
    keys = [k.encode(charset) for k, _ in items]
    values = [v.encode(charset) for _, v in items]
    n = len(items)
    offset = 7 * 4 + 16 * n  # header, then the key and value tables (length, offset each)
    table: list[int] = []
    for text in keys + values:
        table += [len(text), offset]
        offset += len(text) + 1
    data = struct.pack("<7I", 0x950412DE, 0, n, 28, 28 + 8 * n, 0, 0)
    data += struct.pack(f"<{4 * n}I", *table) + b"".join(t + b"\0" for t in keys + values)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    io.write_text_atomic(path, data)


def variety_code(name: str) -> str:
    """The language code of a locale directory name or of a code a user wrote: lower case,
    ``@`` as ``_``, without a charset (``zh_CN`` → ``zh_cn``, ``sr@latin`` → ``sr_latin``)."""
    base, _, modifier = name.partition("@")
    code = base.split(".")[0] + (f"_{modifier}" if modifier else "")
    return code.lower()


def canonical_pair(pair: str) -> str:
    """``src-tgt`` with both codes in canonical form (``en-zh_CN`` → ``en-zh_cn``)."""
    src, _, tgt = pair.partition("-")
    if not src or not tgt or "-" in tgt:
        raise ValueError(f"pair {pair!r}: expected 'src-tgt', e.g. 'en-de' or 'en-zh_CN'")
    return f"{variety_code(src)}-{variety_code(tgt)}"


def _folds_into(loc: str) -> str | None:
    """The plain code a locale directory also fills in, or None (see the module docstring)."""
    if "@" in loc:
        return None
    match = _REGIONAL.match(variety_code(loc))
    if not match:
        return None
    lang, region = match.groups()
    separate = SEPARATE_VARIETIES.get(lang, frozenset())
    if separate is None or region in separate:
        return None
    return lang


def _directories(locale_dir: str) -> dict[str, dict[str, str]]:
    """{locale directory name: {domain: path}} of the directories holding ``.mo`` files."""
    if not os.path.isdir(locale_dir):
        raise FileNotFoundError(f"locale directory not found: {locale_dir}")
    out: dict[str, dict[str, str]] = {}
    for loc in sorted(os.listdir(locale_dir)):
        d = os.path.join(locale_dir, loc, "LC_MESSAGES")
        if not os.path.isdir(d):
            continue
        found = {fn[:-3]: os.path.join(d, fn) for fn in sorted(os.listdir(d)) if fn.endswith(".mo")}
        if found:
            out[loc] = found
    return out


def find_catalogs(
    locale_dir: str = DEFAULT_LOCALE_DIR, languages: Iterable[str] | None = None
) -> dict[str, dict[str, str]]:
    """{language code: {domain: path}} of the ``.mo`` files under ``locale_dir``.

    Every locale directory is a language (``zh_CN`` → ``zh_cn``); a plain code also takes the
    domains it lacks from its regional directories of the same written variety (module
    docstring). ``languages``: only these codes (any spelling: ``zh_CN`` or ``zh_cn``).
    """
    dirs = _directories(locale_dir)
    out: dict[str, dict[str, str]] = {}
    for loc, found in dirs.items():
        slot = out.setdefault(variety_code(loc), {})
        for domain, path in found.items():
            slot.setdefault(domain, path)
    for loc, found in dirs.items():  # sorted: the first regional directory wins a domain
        plain = _folds_into(loc)
        if plain is not None:
            slot = out.setdefault(plain, {})
            for domain, path in found.items():
                slot.setdefault(domain, path)
    if languages is not None:
        wanted = {variety_code(code) for code in languages}
        out = {code: v for code, v in out.items() if code in wanted}
    return out


def _unknown_language(code: str, available: Sequence[str], locale_dir: str) -> ValueError:
    """The error for a code without catalogs: the varieties of a language with several, or the
    closest available codes."""
    varieties = sorted(c for c in available if c.startswith(code + "_") and "_" not in code)
    if varieties and code in SEPARATE_VARIETIES:
        return ValueError(
            f"gettext language {code!r} has several written varieties under {locale_dir}: "
            f"{', '.join(varieties)}; name one, e.g. 'en-{varieties[0]}' (a plain {code!r} is "
            "refused rather than mixing them)")
    closest = difflib.get_close_matches(code, available, n=5, cutoff=0.5)
    return ValueError(
        f"no gettext catalogs for language {code!r} under {locale_dir}; closest: "
        f"{', '.join(closest) or 'none'}; available ({len(available)}): {', '.join(available)}"
        + ("" if available else " (install packages that ship translations, see the docs)"))


def _pair_catalogs(
    pair: str, locale_dir: str, domains: Iterable[str] | None
) -> tuple[str, str, list[str], dict[str, dict[str, str]]]:
    """(src, tgt, non-English codes, {domain: {code: path}}) of the domains a pair reads."""
    src, _, tgt = canonical_pair(pair).partition("-")
    if src == tgt:
        raise ValueError(f"pair {pair!r}: expected 'src-tgt' with two different languages")
    langs = [c for c in (src, tgt) if c != "en"]
    everything = find_catalogs(locale_dir)
    for code in langs:
        if code not in everything:
            raise _unknown_language(code, sorted(everything), locale_dir)
    wanted = set(domains) if domains is not None else None
    common = set.intersection(*(set(everything[c]) for c in langs))
    used = {d: {c: everything[c][d] for c in langs} for d in sorted(common)
            if wanted is None or d in wanted}
    return src, tgt, langs, used


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
    src, tgt, langs, used = _pair_catalogs(pair, locale_dir, domains)
    seen: set[tuple[str, str]] = set()
    out: list[tuple[str, str]] = []
    skipped: list[str] = []
    for paths in used.values():
        try:
            tables = {c: _cached_catalog(paths[c]) for c in langs}
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
    if skipped and (pair, tuple(skipped)) not in _WARNED:  # once per process, not per call
        _WARNED.add((pair, tuple(skipped)))
        log.warning("gettext %s: skipped %d unreadable catalog(s): %s", pair, len(skipped), skipped)
    if not out:
        raise ValueError(f"gettext catalogs under {locale_dir} give no {pair} pairs"
                         + (f" in domains {sorted(domains)}" if domains is not None else ""))
    return out


def _sha256(path: str) -> str:
    """The file's SHA-256, remembered per file version (the manifest and every task's
    definition ask for it)."""
    return _sha256_version(path, _version(path))


@functools.lru_cache(maxsize=512)
def _sha256_version(path: str, version: tuple[int, int, int]) -> str:
    del version  # part of the cache key only
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def catalog_manifest(
    pairs: Iterable[str], locale_dir: str = DEFAULT_LOCALE_DIR,
    domains: Iterable[str] | None = None,
) -> dict:
    """What each pair is read from: ``{"format", "locale_dir", "domains", "pairs": {pair:
    {"catalogs": [{"language", "domain", "path", "size", "sha256"}], "pairs": n, "digest"}},
    "digest"}``; paths are relative to ``locale_dir``. A pair's digest covers its catalogs'
    contents, relative paths and its pair count, the whole digest every pair's digest and the
    domains, so identical catalogs under another ``locale_dir`` give the same digests."""
    domain_list = sorted(domains) if domains is not None else None
    entries = {canonical_pair(pair): _pair_manifest(canonical_pair(pair), locale_dir, domain_list)
               for pair in pairs}
    return {
        "format": MANIFEST_FORMAT,
        "locale_dir": os.path.abspath(locale_dir),
        "domains": domain_list,
        "pairs": entries,
        "digest": _digest({"domains": domain_list,
                           "pairs": {k: v["digest"] for k, v in entries.items()}}),
    }


def _pair_manifest(pair: str, locale_dir: str, domains: list[str] | None,
                   n: int | None = None) -> dict:
    """One pair's manifest entry (:func:`catalog_manifest`); ``n``: its pair count when the
    caller already has it."""
    _, _, _, used = _pair_catalogs(pair, locale_dir, domains)
    catalogs = [
        {"language": code, "domain": domain,
         "path": os.path.relpath(path, locale_dir), "size": os.path.getsize(path),
         "sha256": _sha256(path)}
        for domain, paths in used.items() for code, path in sorted(paths.items())
    ]
    if n is None:
        n = len(gettext_pairs(pair, locale_dir, domains))
    return {"catalogs": catalogs, "pairs": n, "digest": _digest({"catalogs": catalogs, "pairs": n})}


def manifest_changes(recorded: Mapping, current: Mapping) -> list[str]:
    """One line per pair whose catalogs differ between two manifests (added, removed, or
    changed: the catalog files that differ and the pair counts); empty when the digests agree."""
    if recorded.get("digest") == current.get("digest"):
        return []
    old, new = dict(recorded.get("pairs") or {}), dict(current.get("pairs") or {})
    lines = [f"{p}: not in the recorded manifest" for p in sorted(set(new) - set(old))]
    lines += [f"{p}: recorded, not asked for now" for p in sorted(set(old) - set(new))]
    for pair in sorted(set(old) & set(new)):
        if old[pair].get("digest") == new[pair].get("digest"):
            continue
        files = {c["path"]: c["sha256"] for c in old[pair].get("catalogs", [])}
        now = {c["path"]: c["sha256"] for c in new[pair].get("catalogs", [])}
        changed = sorted(p for p in set(files) | set(now) if files.get(p) != now.get(p))
        shown = ", ".join(changed[:4]) + (f" … ({len(changed)} files)" if len(changed) > 4 else "")
        lines.append(f"{pair}: {old[pair].get('pairs')} → {new[pair].get('pairs')} pairs; "
                     f"catalogs differ: {shown or 'none (same files, other domains)'}")
    if not lines and recorded.get("domains") != current.get("domains"):
        lines.append(f"domains: {recorded.get('domains')} → {current.get('domains')}")
    return lines


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
    cap: int | None = None,
) -> str:
    """Register a task over gettext catalogs; ``validation`` / ``test`` take fixed fractions
    (default 5% each) chosen by a hash of the source string, ``train`` the rest.

    ``cap``: keep ``cap`` training pairs, those first in a hash order of the source string (a
    fixed, machine-independent subset; a smaller cap keeps a subset of a larger one); a cap
    above the training pairs available is an error. The task's pair is canonical
    (``en-zh_CN`` → ``en-zh_cn``) and its definition records the catalogs' digest
    (:func:`catalog_manifest`), so a token cache built from other catalogs is rebuilt."""
    from mnmt.data.tasks import register_text_task

    fractions = dict(heldout or {"validation": 0.05, "test": 0.05})
    if any(not 0 <= f < 1 for f in fractions.values()) or sum(fractions.values()) >= 1:
        raise ValueError(f"heldout fractions must be in [0, 1) and sum below 1, got {fractions}")
    if cap is not None and (not isinstance(cap, int) or cap < 1):
        raise ValueError(f"gettext task {name!r}: cap: expected a positive int, got {cap!r}")
    pair = canonical_pair(pair)
    pairs = gettext_pairs(pair, locale_dir, domains)
    splits = _split(pairs, fractions)
    empty = [k for k, v in splits.items() if not v]
    if empty:
        raise ValueError(f"gettext task {name!r}: splits {empty} are empty ({len(pairs)} pairs)")
    if cap is not None:
        splits["train"] = _capped(splits["train"], cap, pair)
    digest = _pair_manifest(pair, locale_dir, sorted(domains) if domains is not None else None,
                            n=len(pairs))["digest"]
    registered = register_text_task(
        name, pair, vocab_path, {k: (lambda v=v: iter(v)) for k, v in splits.items()},
        split_sizes={k: len(v) for k, v in splits.items()},
        definition={"kind": "gettext", "locale_dir": locale_dir,
                    "domains": sorted(domains) if domains is not None else None,
                    "heldout": fractions, "n": len(pairs), "cap": cap,
                    "catalogs": digest},
    )
    # the pairs are deduplicated over every domain at registration (a pair's first domain
    # keeps it), so a cache build's part takes its block of these lists, not whole domains
    attach(registered, ListParts({k: (lambda v=v: v) for k, v in splits.items()}))
    return registered


def _split(pairs: list[tuple[str, str]], fractions: Mapping[str, float]) -> dict[str, list]:
    """Pairs into ``train`` and the held-out splits by a hash of the source string."""
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
    return splits


def _capped(train: list[tuple[str, str]], cap: int, pair: str) -> list[tuple[str, str]]:
    """The ``cap`` training pairs first in a hash order of their source (kept in their order)."""
    if cap > len(train):
        raise ValueError(f"gettext {pair}: cap {cap:,} is more than the {len(train):,} training "
                         "pairs available; expected a cap of at most that")
    keep = set(sorted(range(len(train)), key=lambda i: _bucket("cap\0" + train[i][0]))[:cap])
    return [item for i, item in enumerate(train) if i in keep]
