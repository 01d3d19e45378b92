"""Languages of the synthetic family derived from a parent proto-language (`build_language`).

A language is fixed by its :class:`LanguageSpec` (word order, adjective and adposition placement,
morphology, script, synonyms; `mnmt.data.synthetic.rendering`, which also renders a built
:class:`Language`; its scripts are `mnmt.data.synthetic.scripts`). Word forms descend from a
*parent* proto-language: each lemma keeps its (sound-changed) parent form with probability
1 - ``mutation`` and is replaced by a fresh form otherwise, so two children of one parent with
small mutation rates (de-like / fr-like) share most of their lexicon and a child of another
parent (zh-like) shares none: relatedness is controlled by the parent and the mutation rate.

Two invariants make the conditional entropy exact (checked when a language is built and by the
tests): every surface word form maps to exactly one (category, lemma, features) — so the tree is
a function of any rendered sentence — and synonyms of one lemma are distinct strings, so distinct
choice sequences give distinct target strings (for the spaceless script, every word starts with a
character from an "initial" set that no other position uses, which makes segmentation unique).
"""

from __future__ import annotations

import random

from mnmt.data.synthetic.grammar import CATEGORIES, Lexicon, stable_seed
from mnmt.data.synthetic.rendering import (
    ORDERS,
    SCRIPTS,
    Choice,
    Language,
    LanguageSpec,
    choice_of,
)
from mnmt.data.synthetic.scripts import CJK_INITIAL, CONSONANTS, VOWELS, proto_form, spell

__all__ = ["LanguageSpec", "Language", "build_language", "ORDERS", "SCRIPTS"]


def _syllables_for_rank(rank: int, n: int) -> int:
    return 1 + (rank >= max(1, n // 5)) + (rank >= max(2, n // 2))


def _sound_change(rng: random.Random, rate: float) -> tuple[dict[str, str], dict[str, str]]:
    cons = {c: (rng.choice(CONSONANTS) if rng.random() < rate else c) for c in CONSONANTS}
    vows = {v: (rng.choice(VOWELS) if rng.random() < rate else v) for v in VOWELS}
    return cons, vows


def _fusional_function_words(rng: random.Random, spec: LanguageSpec) -> dict[str, list[str]]:
    """Determiners and agreement suffixes: distinct where the tree must be recoverable."""
    def word() -> str:
        return rng.choice(CONSONANTS) + rng.choice(VOWELS) + rng.choice(("", "n", "r", "s"))

    fw: dict[str, list[str]] = {}
    cases = ("nom", "acc", "obl") if spec.case else ("x",)
    used: set[str] = set()
    for definite in ("def", "indef"):
        for num in ("sg", "pl"):
            for case in cases:
                if definite == "indef" and num == "pl" and rng.random() < 0.5:
                    continue  # bare indefinite plural (no determiner), as in many languages
                forms = []
                # (no draw when the rate is 0: the presets' streams stay as they were)
                n_forms = 2 if spec.function_synonym_rate and rng.random() < spec.function_synonym_rate else 1
                while len(forms) < n_forms:
                    w = word()
                    if w not in used:
                        used.add(w)
                        forms.append(w)
                fw[f"det.{definite}.{num}.{case}"] = forms
    sfx_pool = ["", "s", "en", "e", "i", "a", "o", "er", "es", "et", "ut", "on", "ar", "ir"]
    rng.shuffle(sfx_pool)
    n_sg, n_pl = "", next(x for x in sfx_pool if x)
    fw["sfx.n.sg"], fw["sfx.n.pl"] = [n_sg], [n_pl]
    fw["sfx.a.sg"], fw["sfx.a.pl"] = [""], [rng.choice([x for x in sfx_pool if x])]
    verb = [x for x in sfx_pool if x]
    rng.shuffle(verb)
    # present sg/pl and past sg/pl: four distinct endings (tense is read off the verb).
    fw["sfx.v.pres.sg"], fw["sfx.v.pres.pl"] = [verb[0]], [""]
    fw["sfx.v.past.sg"], fw["sfx.v.past.pl"] = [verb[1]], [verb[2]]
    return fw


def _isolating_function_words(rng: random.Random, script: str) -> dict[str, list[str]]:
    """Particles: determiners, classifiers, plural and past markers, adjective linker."""
    names = ["det.def", "det.indef.sg", "det.indef.pl", "pl", "past", "lnk",
             "cls.0", "cls.1", "cls.2", "cls.3"]
    if script == "cjk":
        picks = rng.sample(range(len(CJK_INITIAL)), len(names))
        return {n: [CJK_INITIAL[i]] for n, i in zip(names, picks, strict=True)}
    words: list[str] = []
    while len(words) < len(names):
        w = rng.choice(CONSONANTS) + rng.choice(VOWELS)
        if w not in words:
            words.append(w)
    return {n: [w] for n, w in zip(names, words, strict=True)}


def _collocation_particles(spec: LanguageSpec, family_seed: int,
                           function_words: dict[str, list[str]]) -> dict[str, list[str]]:
    """``spec.collocations`` particle words ``col.i``, distinct from the other function words.

    Drawn from their own random stream, so a language without them is built exactly as before.
    """
    if not spec.collocations:
        return {}
    rng = random.Random(stable_seed("collocation-words", spec.code, family_seed))
    used = {w for forms in function_words.values() for w in forms}
    out: dict[str, list[str]] = {}
    while len(out) < spec.collocations:
        if spec.script == "cjk":
            w = rng.choice(CJK_INITIAL)
        else:
            w = rng.choice(CONSONANTS) + rng.choice(VOWELS) + rng.choice(CONSONANTS) + rng.choice(VOWELS)
        if w not in used:
            used.add(w)
            out[f"col.{len(out)}"] = [w]
    return out


def build_language(spec: LanguageSpec, lex: Lexicon, family_seed: int) -> Language:
    """Derive a language from its parent proto-language (deterministic given the family seed)."""
    spec.validate()
    parent_rng = random.Random(stable_seed("parent", spec.parent, family_seed))
    proto = {
        c: [proto_form(parent_rng, _syllables_for_rank(r, n)) for r in range(n)]
        for c, n in lex.sizes.items()
    }
    rng = random.Random(stable_seed("language", spec.code, family_seed))
    cons_map, vow_map = _sound_change(rng, spec.mutation / 2)
    fw_raw = (
        _fusional_function_words(rng, spec)
        if spec.morphology == "fusional"
        else _isolating_function_words(rng, spec.script)
    )
    fw_raw.update(_collocation_particles(spec, family_seed, fw_raw))
    taken: set[str] = set()
    for k, forms in fw_raw.items():
        if not k.startswith("sfx."):
            taken.update(forms)

    def fresh(n_syll: int) -> str:
        for _ in range(1000):
            w = spell(proto_form(rng, n_syll), spec.script)
            if w not in taken:
                return w
            n_syll += rng.random() < 0.2
        raise RuntimeError("could not find a fresh word form")

    suffixes = {
        "N": [fw_raw["sfx.n.sg"][0], fw_raw["sfx.n.pl"][0]] if "sfx.n.sg" in fw_raw else [""],
        "A": [fw_raw["sfx.a.sg"][0], fw_raw["sfx.a.pl"][0]] if "sfx.a.sg" in fw_raw else [""],
        "V": sorted({fw_raw[k][0] for k in fw_raw if k.startswith("sfx.v.")}) or [""],
        "R": [""],
        "P": [""],
    }
    surface: set[str] = set(taken)

    def claim(stem: str, cat: str) -> bool:
        words = {stem + s for s in suffixes[cat]}
        if words & surface:
            return False
        surface.update(words)
        return True

    content: dict[str, list[Choice]] = {}
    inherited: dict[str, list[bool]] = {}
    for cat in CATEGORIES:
        n = lex.sizes[cat]
        content[cat], inherited[cat] = [], []
        for r in range(n):
            syls = proto[cat][r]
            keep = rng.random() >= spec.mutation
            if keep:
                syls = [(cons_map[c], vow_map[v], k) for c, v, k in syls]
                stem = spell(syls, spec.script)
            else:
                stem = fresh(len(syls))
            if not claim(stem, cat):
                keep = False
                stem = fresh(len(syls))
                while not claim(stem, cat):
                    stem = fresh(len(syls) + 1)
            forms = [stem]
            k = 1
            if cat != "P" and spec.max_synonyms > 1 and rng.random() < spec.synonym_rate:
                k = rng.randint(2, spec.max_synonyms)
            while len(forms) < k:
                alt = fresh(len(syls))
                if claim(alt, cat):
                    forms.append(alt)
            probs = [rng.gammavariate(spec.synonym_concentration, 1.0) + 1e-3 for _ in forms]
            content[cat].append(choice_of(forms, probs))
            inherited[cat].append(keep)
    function: dict[str, Choice] = {}
    for key, forms in fw_raw.items():
        if len(forms) > 1:
            probs = [rng.gammavariate(spec.synonym_concentration, 1.0) + 1e-3 for _ in forms]
        else:
            probs = [1.0]
        function[key] = choice_of(forms, probs)
    lang = Language(spec, lex, content, function, inherited, collocation_seed=family_seed)
    _index_analyses(lang, suffixes)
    return lang


def _index_analyses(lang: Language, suffixes: dict[str, list[str]]) -> None:
    """Map every surface word to its analysis; fail loudly on any ambiguity."""
    table: dict[str, tuple] = {}

    def add(word: str, analysis: tuple) -> None:
        prev = table.get(word)
        if prev is not None and prev != analysis:
            raise RuntimeError(
                f"language {lang.code}: surface form {word!r} is ambiguous ({prev} vs {analysis})"
            )
        table[word] = analysis

    for key, ch in lang.function.items():
        if not key.startswith("sfx."):
            for w in ch.forms:
                add(w, ("F", key))
    for cat, choices in lang.content.items():
        for lemma, ch in enumerate(choices):
            for stem in ch.forms:
                for sfx in suffixes[cat]:
                    add(stem + sfx, (cat, lemma, sfx))
    lang.analyses = table
