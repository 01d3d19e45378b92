"""A language of the synthetic family as built: its specification and its renderer.

A :class:`LanguageSpec` fixes word order (SVO/SOV/VSO), adjective and adposition placement,
morphology (fusional agreement suffixes or isolating particles), script (`scripts`) and the
stochastic lexical choice (synonyms per lemma with Dirichlet-drawn probabilities). A built
:class:`Language` (`mnmt.data.synthetic.languages.build_language`) renders a sentence tree as a
sequence of word slots, each a :class:`Choice` among surface words with exact probabilities, so
log p(text | tree) and H(text | tree) are sums over the slots.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate

from mnmt.data.synthetic.grammar import Lexicon, NounPhrase, Sentence, stable_seed
from mnmt.data.synthetic.scripts import CJK_INITIAL_SET, to_deva

__all__ = ["Choice", "Language", "LanguageSpec", "ORDERS", "SCRIPTS", "choice_of"]

ORDERS = ("SVO", "SOV", "VSO")
SCRIPTS = ("latin", "cjk", "deva")


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
class Choice:
    """A word slot with alternatives: forms, cumulative weights, log-probs, entropy (nats)."""

    forms: tuple[str, ...]
    cum: tuple[float, ...]
    logp: tuple[float, ...]
    entropy: float


def choice_of(forms: list[str], probs: list[float]) -> Choice:
    """The choice among `forms` with probabilities proportional to `probs`."""
    total = sum(probs)
    p = [x / total for x in probs]
    return Choice(
        tuple(forms),
        tuple(accumulate(p)),
        tuple(math.log(x) for x in p),
        -sum(x * math.log(x) for x in p if x > 0),
    )


@dataclass
class Language:
    """A built language: per-lemma synonym choices, function words, and a renderer."""

    spec: LanguageSpec
    lex: Lexicon
    content: dict[str, list[Choice]]
    function: dict[str, Choice]
    inherited: dict[str, list[bool]]  # per lemma: form descends from the parent
    collocation_seed: int = 0  # seeds the (verb, subject noun) → particle table
    analyses: dict[str, tuple] = field(default_factory=dict)  # surface word → analysis
    _deva_cache: dict[str, str] = field(default_factory=dict, repr=False)
    _surface_cache: dict[tuple, Choice] = field(default_factory=dict, repr=False)

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
    def _surface(self, cat: str, lemma: int, sfx: str) -> Choice:
        """The choice of surface words (stem + suffix, in the script) of a lemma; memoised."""
        key = (cat, lemma, sfx)
        ch = self._surface_cache.get(key)
        if ch is None:
            base = self.content[cat][lemma]
            suffix = self.function[sfx].forms[0] if sfx else ""
            forms = tuple(self._display(f + suffix) for f in base.forms)
            ch = self._surface_cache[key] = Choice(forms, base.cum, base.logp, base.entropy)
        return ch

    def _tables(self) -> None:
        """Surface choices per lemma for every inflection, as lists indexed by lemma."""
        fus = self.spec.morphology == "fusional"
        n = self.lex.sizes

        def row(cat: str, sfx: str) -> list[Choice]:
            return [self._surface(cat, i, sfx if fus else "") for i in range(n[cat])]

        self._t_noun = {pl: row("N", "sfx.n." + ("pl" if pl else "sg")) for pl in (False, True)}
        self._t_adj = {pl: row("A", "sfx.a." + ("pl" if pl else "sg")) for pl in (False, True)}
        self._t_verb = {k: row("V", key) for k, key in self._verb_keys.items()}
        self._t_prep = row("P", "")
        self._t_adv = row("R", "")
        self._t_col: list[list[Choice]] = []
        if self.spec.collocations:
            rng = random.Random(stable_seed("collocation", self.spec.code, self.collocation_seed))
            part = [self.function[f"col.{i}"] for i in range(self.spec.collocations)]
            self._t_col = [[part[rng.randrange(len(part))] for _ in range(n["N"])]
                           for _ in range(n["V"])]

    def _np_slots(self, np: NounPhrase, case: str) -> list[Choice]:
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

    def slots(self, s: Sentence) -> list[Choice]:
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
        pp: list[Choice] = []
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
            if ch in CJK_INITIAL_SET or not out:
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
            out = self._deva_cache[word] = to_deva(word)
        return out
