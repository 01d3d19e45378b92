"""Languages of the synthetic family: specifications, derivation from a parent, rendering.

A :class:`LanguageSpec` fixes word order (SVO/SOV/VSO), adjective and adposition placement,
morphology (fusional agreement suffixes or isolating particles), script (Latin, a CJK-like
script without spaces, or a Devanagari-like abugida) and the stochastic lexical choice
(synonyms per lemma with Dirichlet-drawn probabilities). Word forms descend from a *parent*
proto-language: each lemma keeps its (sound-changed) parent form with probability
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

import math
import random
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate

from mnmt.data.synthetic.grammar import (
    CATEGORIES,
    Lexicon,
    NounPhrase,
    Sentence,
    stable_seed,
)

__all__ = ["LanguageSpec", "Language", "build_language", "ORDERS", "SCRIPTS"]

ORDERS = ("SVO", "SOV", "VSO")
SCRIPTS = ("latin", "cjk", "deva")
_CONS = "ptkbdgmnlrsfvzhwj"
_VOWELS = "aeiou"
_CODAS = ("", "", "", "n", "r", "s", "l", "k")


@dataclass(frozen=True)
class LanguageSpec:
    """Typological specification of one language of the family."""

    code: str
    name: str = ""
    order: str = "SVO"
    adjective: str = "pre"  # "pre" | "post" (relative to the noun)
    adposition: str = "pre"  # "pre" (prepositions) | "post" (postpositions)
    morphology: str = "fusional"  # "fusional" (agreement suffixes) | "isolating" (particles)
    case: bool = False  # determiners mark subject / object / oblique case (fusional only)
    script: str = "latin"
    parent: str = "west"  # proto-language the lexicon descends from
    mutation: float = 0.3  # P(lemma replaced by a fresh form) — 0 = same words as the parent
    synonym_rate: float = 0.5  # fraction of content lemmas with more than one synonym
    max_synonyms: int = 2
    synonym_concentration: float = 2.0  # Dirichlet α of synonym probabilities
    function_synonym_rate: float = 0.0  # share of determiners with a free variant (fusional only)
    # Collocation particles: after the verb, one of this many particle words, chosen by a fixed
    # random table of (verb lemma, subject noun lemma) — deterministic given the tree (no entropy),
    # but a table that must be memorised in the model's layers (0 = none).
    collocations: int = 0

    def validate(self) -> None:
        if not self.code or not self.code.isalnum():
            raise ValueError(f"LanguageSpec.code: expected a short alphanumeric code, got {self.code!r}")
        checks = {
            "order": (self.order, ORDERS),
            "adjective": (self.adjective, ("pre", "post")),
            "adposition": (self.adposition, ("pre", "post")),
            "morphology": (self.morphology, ("fusional", "isolating")),
            "script": (self.script, SCRIPTS),
        }
        for name, (value, allowed) in checks.items():
            if value not in allowed:
                raise ValueError(
                    f"LanguageSpec({self.code}).{name}: expected one of {allowed}, got {value!r}"
                )
        for name in ("mutation", "synonym_rate", "function_synonym_rate"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"LanguageSpec({self.code}).{name}: expected [0, 1], got {v}")
        if self.script == "cjk" and self.morphology != "isolating":
            raise ValueError(
                f"LanguageSpec({self.code}): the cjk script needs morphology='isolating' "
                "(suffixes are Latin letters)"
            )
        if self.max_synonyms < 1:
            raise ValueError(f"LanguageSpec({self.code}).max_synonyms: expected >= 1")
        if not 0 <= self.collocations <= 64:
            raise ValueError(
                f"LanguageSpec({self.code}).collocations: expected 0..64, got {self.collocations}"
            )
        if self.synonym_concentration <= 0:
            raise ValueError(f"LanguageSpec({self.code}).synonym_concentration: expected > 0")


@dataclass
class _Choice:
    """A word slot with alternatives: forms, cumulative weights, log-probs, entropy (nats)."""

    forms: tuple[str, ...]
    cum: tuple[float, ...]
    logp: tuple[float, ...]
    entropy: float


def _choice(forms: list[str], probs: list[float]) -> _Choice:
    total = sum(probs)
    p = [x / total for x in probs]
    return _Choice(
        tuple(forms),
        tuple(accumulate(p)),
        tuple(math.log(x) for x in p),
        -sum(x * math.log(x) for x in p if x > 0),
    )


def _proto_form(rng: random.Random, n_syll: int) -> list[tuple[str, str, str]]:
    return [(rng.choice(_CONS), rng.choice(_VOWELS), rng.choice(_CODAS)) for _ in range(n_syll)]


def _syllables_for_rank(rank: int, n: int) -> int:
    return 1 + (rank >= max(1, n // 5)) + (rank >= max(2, n // 2))


@dataclass
class Language:
    """A built language: per-lemma synonym choices, function words, and a renderer."""

    spec: LanguageSpec
    lex: Lexicon
    content: dict[str, list[_Choice]]
    function: dict[str, _Choice]
    inherited: dict[str, list[bool]]  # per lemma: form descends from the parent
    collocation_seed: int = 0  # seeds the (verb, subject noun) → particle table
    analyses: dict[str, tuple] = field(default_factory=dict)  # surface word → analysis
    _deva_cache: dict[str, str] = field(default_factory=dict, repr=False)
    _surface_cache: dict[tuple, _Choice] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        case = self.spec.case
        self._det_keys = {
            (d, p, c): f"det.{'def' if d else 'indef'}.{'pl' if p else 'sg'}.{c if case else 'x'}"
            for d in (True, False) for p in (True, False) for c in ("nom", "acc", "obl")
        }
        self._verb_keys = {
            (past, pl): f"sfx.v.{'past' if past else 'pres'}.{'pl' if pl else 'sg'}"
            for past in (True, False) for pl in (True, False)
        }
        self._cls_keys = [f"cls.{i}" for i in range(4)]
        self._fusional = self.spec.morphology == "fusional"
        self._pre_adj = self.spec.adjective == "pre"
        self._pre_adp = self.spec.adposition == "pre"
        self._order = self.spec.order
        self._tables()

    @property
    def code(self) -> str:
        return self.spec.code

    @property
    def spaced(self) -> bool:
        return self.spec.script != "cjk"

    # ---- rendering -------------------------------------------------------------------------
    def _surface(self, cat: str, lemma: int, sfx: str) -> _Choice:
        """The choice of surface words (stem + suffix, in the script) of a lemma; memoised."""
        key = (cat, lemma, sfx)
        ch = self._surface_cache.get(key)
        if ch is None:
            base = self.content[cat][lemma]
            suffix = self.function[sfx].forms[0] if sfx else ""
            forms = tuple(self._display(f + suffix) for f in base.forms)
            ch = self._surface_cache[key] = _Choice(forms, base.cum, base.logp, base.entropy)
        return ch

    def _tables(self) -> None:
        """Surface choices per lemma for every inflection, as lists indexed by lemma."""
        fus = self.spec.morphology == "fusional"
        n = self.lex.sizes

        def row(cat: str, sfx: str) -> list[_Choice]:
            return [self._surface(cat, i, sfx if fus else "") for i in range(n[cat])]

        self._t_noun = {pl: row("N", "sfx.n." + ("pl" if pl else "sg")) for pl in (False, True)}
        self._t_adj = {pl: row("A", "sfx.a." + ("pl" if pl else "sg")) for pl in (False, True)}
        self._t_verb = {k: row("V", key) for k, key in self._verb_keys.items()}
        self._t_prep = row("P", "")
        self._t_adv = row("R", "")
        self._t_col: list[list[_Choice]] = []
        if self.spec.collocations:
            rng = random.Random(stable_seed("collocation", self.spec.code, self.collocation_seed))
            part = [self.function[f"col.{i}"] for i in range(self.spec.collocations)]
            self._t_col = [[part[rng.randrange(len(part))] for _ in range(n["N"])]
                           for _ in range(n["V"])]

    def _np_slots(self, np: NounPhrase, case: str) -> list[_Choice]:
        f = self.function
        if self._fusional:
            det = f.get(self._det_keys[np.definite, np.plural, case])
            out = [det] if det is not None else []
            noun = [self._t_noun[np.plural][np.noun]]
            adj_t = self._t_adj[np.plural]
            adjs = [adj_t[a] for a in np.adjectives]
        else:
            out = [f["det.def" if np.definite else ("det.indef.pl" if np.plural else "det.indef.sg")]]
            if not np.plural:
                out.append(f[self._cls_keys[self.lex.noun_class[np.noun]]])
            noun = [self._t_noun[False][np.noun]]
            if np.plural:
                noun.append(f["pl"])
            adjs = []
            for a in np.adjectives:
                adjs += [self._t_adj[False][a], f["lnk"]]
        return out + (adjs + noun if self._pre_adj else noun + adjs)

    def slots(self, s: Sentence) -> list[_Choice]:
        """The word slots of a tree in surface order, each a choice among surface words."""
        np_slots = self._np_slots
        subj = np_slots(s.subject, "nom")
        if self._fusional:
            verb = [self._t_verb[s.past, s.subject.plural][s.verb]]
        else:
            verb = [self._t_verb[False, False][s.verb]]
            if s.past:
                verb.append(self.function["past"])
        if self._t_col:
            verb.append(self._t_col[s.verb][s.subject.noun])
        obj = np_slots(s.obj, "acc") if s.obj is not None else []
        pp: list[_Choice] = []
        if s.pp is not None:
            prep = [self._t_prep[s.pp[0]]]
            inner = np_slots(s.pp[1], "obl")
            pp = prep + inner if self._pre_adp else inner + prep
        adv = [self._t_adv[s.adverb]] if s.adverb is not None else []
        o = self._order
        if o == "SVO":
            return subj + verb + obj + pp + adv
        if o == "SOV":
            return subj + adv + pp + obj + verb
        return verb + subj + obj + pp + adv  # VSO

    def render(self, s: Sentence, rng: random.Random) -> tuple[str, float, float]:
        """Sample a surface string for tree ``s``: (text, log p(text | tree), H(text | tree))."""
        words = []
        logp = 0.0
        ent = 0.0
        rand = rng.random
        for ch in self.slots(s):
            forms = ch.forms
            if len(forms) == 1:
                words.append(forms[0])
            else:
                cum = ch.cum
                i = bisect_right(cum, rand() * cum[-1])  # = draw(rng, cum), inlined
                words.append(forms[i])
                logp += ch.logp[i]
                ent += ch.entropy
        return (" ".join(words) if self.spaced else "".join(words)), logp, ent

    def _join(self, words: list[str]) -> str:
        return " ".join(words) if self.spaced else "".join(words)

    def split_words(self, text: str) -> list[str]:
        """Inverse of the join: words of a surface string (unique segmentation)."""
        if self.spaced:
            return text.split(" ")
        out: list[str] = []
        for ch in text:
            if ch in _CJK_INITIAL_SET or not out:
                out.append(ch)
            else:
                out[-1] += ch
        return out

    def log_prob(self, s: Sentence, text: str) -> float:
        """log p(text | tree) under this language's generator (−inf if it cannot produce it)."""
        slots = self.slots(s)
        words = self.split_words(text)
        if len(words) != len(slots):
            return -math.inf
        total = 0.0
        for ch, w in zip(slots, words, strict=True):
            try:
                i = ch.forms.index(w)
            except ValueError:
                return -math.inf
            total += ch.logp[i] if len(ch.forms) > 1 else 0.0
        return total

    def entropy(self, s: Sentence) -> float:
        """H(text | tree) in nats = Σ over slots of the entropy of that slot's choice."""
        return sum(ch.entropy for ch in self.slots(s))

    def _display(self, word: str) -> str:
        """Surface spelling of an internal (Latin) word form; the identity except for deva."""
        if self.spec.script != "deva":
            return word
        out = self._deva_cache.get(word)
        if out is None:
            out = self._deva_cache[word] = _to_deva(word)
        return out


# ---- scripts ---------------------------------------------------------------------------------
_CJK_INITIAL = [chr(0x4E00 + i) for i in range(0, 1800, 3)]
_CJK_INITIAL_SET = frozenset(_CJK_INITIAL)
_CJK_MEDIAL = [chr(0x4E01 + i) for i in range(0, 1800, 3)]
_DEVA_CONS = dict(zip(_CONS, ["प", "त", "क", "ब", "द", "ग", "म", "न", "ल", "र", "स", "फ", "व",
                              "ज", "ह", "ड", "य"], strict=True))
_DEVA_VOWEL = {"a": "अ", "e": "ए", "i": "इ", "o": "ओ", "u": "उ"}
_DEVA_MATRA = {"a": "", "e": "े", "i": "ि", "o": "ो", "u": "ु"}


def _syllable_index(syl: tuple[str, str, str]) -> int:
    c, v, k = syl
    return (_CONS.index(c) * len(_VOWELS) + _VOWELS.index(v)) * len(set(_CODAS)) + sorted(set(_CODAS)).index(k)


def _to_deva(latin: str) -> str:
    """Injective transliteration of an internal Latin form into a Devanagari-like abugida."""
    out = []
    for i, ch in enumerate(latin):
        if ch in _DEVA_MATRA:
            out.append(_DEVA_VOWEL[ch] if i == 0 or latin[i - 1] in _DEVA_MATRA else _DEVA_MATRA[ch])
        else:
            nxt = latin[i + 1] if i + 1 < len(latin) else ""
            out.append(_DEVA_CONS[ch] + ("" if nxt and nxt in _DEVA_MATRA else "\u094d"))
    return "".join(out)


def _spell(syls: list[tuple[str, str, str]], script: str) -> str:
    """Internal spelling: Latin letters (deva is transliterated at display time) or CJK chars."""
    if script != "cjk":
        return "".join(c + v + k for c, v, k in syls)
    # cjk: one character per syllable; the first from the initial set, the others medial.
    idx = [_syllable_index(s) % len(_CJK_INITIAL) for s in syls]
    return _CJK_INITIAL[idx[0]] + "".join(_CJK_MEDIAL[i] for i in idx[1:])


# ---- building --------------------------------------------------------------------------------
def _sound_change(rng: random.Random, rate: float) -> tuple[dict[str, str], dict[str, str]]:
    cons = {c: (rng.choice(_CONS) if rng.random() < rate else c) for c in _CONS}
    vows = {v: (rng.choice(_VOWELS) if rng.random() < rate else v) for v in _VOWELS}
    return cons, vows


def _fusional_function_words(rng: random.Random, spec: LanguageSpec) -> dict[str, list[str]]:
    """Determiners and agreement suffixes: distinct where the tree must be recoverable."""
    def word() -> str:
        return rng.choice(_CONS) + rng.choice(_VOWELS) + rng.choice(("", "n", "r", "s"))

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
        picks = rng.sample(range(len(_CJK_INITIAL)), len(names))
        return {n: [_CJK_INITIAL[i]] for n, i in zip(names, picks, strict=True)}
    words: list[str] = []
    while len(words) < len(names):
        w = rng.choice(_CONS) + rng.choice(_VOWELS)
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
            w = rng.choice(_CJK_INITIAL)
        else:
            w = rng.choice(_CONS) + rng.choice(_VOWELS) + rng.choice(_CONS) + rng.choice(_VOWELS)
        if w not in used:
            used.add(w)
            out[f"col.{len(out)}"] = [w]
    return out


def build_language(spec: LanguageSpec, lex: Lexicon, family_seed: int) -> Language:
    """Derive a language from its parent proto-language (deterministic given the family seed)."""
    spec.validate()
    parent_rng = random.Random(stable_seed("parent", spec.parent, family_seed))
    proto = {
        c: [_proto_form(parent_rng, _syllables_for_rank(r, n)) for r in range(n)]
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
            w = _spell(_proto_form(rng, n_syll), spec.script)
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

    content: dict[str, list[_Choice]] = {}
    inherited: dict[str, list[bool]] = {}
    for cat in CATEGORIES:
        n = lex.sizes[cat]
        content[cat], inherited[cat] = [], []
        for r in range(n):
            syls = proto[cat][r]
            keep = rng.random() >= spec.mutation
            if keep:
                syls = [(cons_map[c], vow_map[v], k) for c, v, k in syls]
                stem = _spell(syls, spec.script)
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
            content[cat].append(_choice(forms, probs))
            inherited[cat].append(keep)
    function: dict[str, _Choice] = {}
    for key, forms in fw_raw.items():
        if len(forms) > 1:
            probs = [rng.gammavariate(spec.synonym_concentration, 1.0) + 1e-3 for _ in forms]
        else:
            probs = [1.0]
        function[key] = _choice(forms, probs)
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
