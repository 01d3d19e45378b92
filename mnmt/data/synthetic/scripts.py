"""The sounds and scripts of the synthetic languages: syllables, and how a word is written.

Internal word forms are Latin syllables (consonant, vowel, coda). A language writes them in one
of three scripts: Latin as they are, a Devanagari-like abugida (an injective transliteration at
display time, `to_deva`) or a CJK-like script without spaces, one character per syllable
(`spell`), where every word starts with a character from `CJK_INITIAL` that no other position
uses, so a spaceless sentence still splits into its words in one way only.
"""

from __future__ import annotations

import random

__all__ = ["CONSONANTS", "VOWELS", "CODAS", "CJK_INITIAL", "CJK_INITIAL_SET", "proto_form",
           "spell", "to_deva"]

CONSONANTS = "ptkbdgmnlrsfvzhwj"
VOWELS = "aeiou"
CODAS = ("", "", "", "n", "r", "s", "l", "k")
CJK_INITIAL = [chr(0x4E00 + i) for i in range(0, 1800, 3)]
CJK_INITIAL_SET = frozenset(CJK_INITIAL)
_CJK_MEDIAL = [chr(0x4E01 + i) for i in range(0, 1800, 3)]
_DEVA_CONS = dict(zip(CONSONANTS, ["प", "त", "क", "ब", "द", "ग", "म", "न", "ल", "र", "स", "फ",
                                   "व", "ज", "ह", "ड", "य"], strict=True))
_DEVA_VOWEL = {"a": "अ", "e": "ए", "i": "इ", "o": "ओ", "u": "उ"}
_DEVA_MATRA = {"a": "", "e": "े", "i": "ि", "o": "ो", "u": "ु"}


def _syllable_index(syl: tuple[str, str, str]) -> int:
    c, v, k = syl
    codas = sorted(set(CODAS))
    return (CONSONANTS.index(c) * len(VOWELS) + VOWELS.index(v)) * len(codas) + codas.index(k)


def to_deva(latin: str) -> str:
    """Injective transliteration of an internal Latin form into a Devanagari-like abugida."""
    out = []
    for i, ch in enumerate(latin):
        if ch in _DEVA_MATRA:
            out.append(_DEVA_VOWEL[ch] if i == 0 or latin[i - 1] in _DEVA_MATRA else _DEVA_MATRA[ch])
        else:
            nxt = latin[i + 1] if i + 1 < len(latin) else ""
            out.append(_DEVA_CONS[ch] + ("" if nxt and nxt in _DEVA_MATRA else "\u094d"))
    return "".join(out)


def spell(syls: list[tuple[str, str, str]], script: str) -> str:
    """Internal spelling: Latin letters (deva is transliterated at display time) or CJK chars."""
    if script != "cjk":
        return "".join(c + v + k for c, v, k in syls)
    # cjk: one character per syllable; the first from the initial set, the others medial.
    idx = [_syllable_index(s) % len(CJK_INITIAL) for s in syls]
    return CJK_INITIAL[idx[0]] + "".join(_CJK_MEDIAL[i] for i in idx[1:])


def proto_form(rng: random.Random, n_syll: int) -> list[tuple[str, str, str]]:
    """`n_syll` random syllables (consonant, vowel, coda) of a proto-language word."""
    return [(rng.choice(CONSONANTS), rng.choice(VOWELS), rng.choice(CODAS)) for _ in range(n_syll)]

