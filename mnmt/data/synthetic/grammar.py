"""Meaning side of the synthetic language family: a shared lexicon of lemmas and sentence trees.

A sentence is sampled once as a language-independent *tree* (which lemmas, number, definiteness,
tense, optional object / prepositional phrase / adverb); every language of the family then
renders the same tree with its own words, word order and morphology. The tree is a function of
any rendered sentence (see :mod:`mnmt.data.synthetic.languages`), so the conditional entropy of a
target given a source equals the entropy of the target's own stochastic choices given the tree.

Lemma frequencies follow a Zipf law p(r) ∝ (r + 1)^(-s) within each part of speech.
Randomness comes from :class:`random.Random` (Mersenne Twister; ``random()`` is stable across
Python versions), drawn through :func:`draw` so that no library sampling helper can change the
streams.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import random
from dataclasses import dataclass
from itertools import accumulate
from typing import NamedTuple

__all__ = [
    "GrammarConfig",
    "Lexicon",
    "NounPhrase",
    "Sentence",
    "build_lexicon",
    "draw",
    "sample_sentence",
    "stable_seed",
    "CATEGORIES",
]

# Parts of speech with open (content) classes; P (prepositions) is a small closed class.
CATEGORIES = ("N", "V", "A", "R", "P")


def stable_seed(*parts: object) -> int:
    """A 64-bit seed from any tuple of str/int parts (stable across processes, unlike hash())."""
    h = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8)
    return int.from_bytes(h.digest(), "little")


def draw(rng: random.Random, cum: tuple[float, ...]) -> int:
    """Index sampled from cumulative weights ``cum`` (last element = total)."""
    return bisect.bisect_right(cum, rng.random() * cum[-1])


@dataclass(frozen=True)
class GrammarConfig:
    """Sizes of the shared lexicon and the probabilities of the sentence grammar.

    Tree: S(NP_subj) V [NP_obj if V transitive] [PP] [Adv], NP = Det (Adj){0..max_adjectives} N.
    """

    nouns: int = 60
    verbs: int = 30
    adjectives: int = 24
    adverbs: int = 10
    prepositions: int = 6
    zipf: float = 1.0  # Zipf exponent s of lemma frequencies within each category
    transitive_fraction: float = 0.6  # fraction of verb lemmas that take an object
    p_plural: float = 0.35
    p_definite: float = 0.55
    p_past: float = 0.4
    p_adjective: float = 0.3  # probability of each further adjective (geometric, capped)
    max_adjectives: int = 1
    p_pp: float = 0.3
    p_adverb: float = 0.2
    # Target languages place one of this many collocation particles after the verb, chosen by a
    # fixed random table of (verb, subject noun): zero entropy, but a table of V x N entries
    # that a model must hold in its layers (see LanguageSpec.collocations). 0 = none.
    collocations: int = 0

    def sizes(self) -> dict[str, int]:
        return {
            "N": self.nouns,
            "V": self.verbs,
            "A": self.adjectives,
            "R": self.adverbs,
            "P": self.prepositions,
        }

    def validate(self) -> None:
        for cat, n in self.sizes().items():
            if int(n) < 1:
                raise ValueError(f"GrammarConfig: category {cat} needs at least 1 lemma, got {n}")
        for name in ("p_plural", "p_definite", "p_past", "p_adjective", "p_pp", "p_adverb",
                     "transitive_fraction"):
            v = getattr(self, name)
            if not (0.0 <= v <= 1.0) or math.isnan(v):
                raise ValueError(f"GrammarConfig.{name}: expected a probability in [0, 1], got {v}")
        if self.zipf < 0 or math.isnan(self.zipf):
            raise ValueError(f"GrammarConfig.zipf: expected a non-negative exponent, got {self.zipf}")
        if not 0 <= self.collocations <= 64:
            raise ValueError(f"GrammarConfig.collocations: expected 0..64, got {self.collocations}")
        if self.max_adjectives < 0:
            raise ValueError("GrammarConfig.max_adjectives: expected >= 0")


@dataclass(frozen=True)
class Lexicon:
    """Language-independent lemmas: per-category Zipf cumulative weights and verb valency."""

    sizes: dict[str, int]
    cum: dict[str, tuple[float, ...]]  # cumulative Zipf weights per category
    transitive: tuple[bool, ...]  # per verb lemma
    noun_class: tuple[int, ...]  # per noun lemma (classifier / gender class, 0..3)
    intransitive_cum: tuple[float, ...]  # Zipf weights restricted to intransitive verbs
    transitive_cum: tuple[float, ...]


def _zipf_cum(n: int, s: float) -> tuple[float, ...]:
    return tuple(accumulate((r + 1.0) ** (-s) for r in range(n)))


def build_lexicon(cfg: GrammarConfig, seed: int) -> Lexicon:
    """The shared lemma inventory (deterministic given ``seed``)."""
    cfg.validate()
    rng = random.Random(stable_seed("lexicon", seed))
    sizes = cfg.sizes()
    cum = {c: _zipf_cum(n, cfg.zipf) for c, n in sizes.items()}
    # Interleave valency over frequency ranks so both kinds have frequent members.
    n_t = max(1, min(sizes["V"] - 1, round(cfg.transitive_fraction * sizes["V"])))
    if sizes["V"] == 1:
        n_t = 1 if cfg.transitive_fraction >= 0.5 else 0
    order = list(range(sizes["V"]))
    rng.shuffle(order)
    trans_set = set(order[:n_t])
    transitive = tuple(v in trans_set for v in range(sizes["V"]))
    noun_class = tuple(rng.randrange(4) for _ in range(sizes["N"]))
    w = [(r + 1.0) ** (-cfg.zipf) for r in range(sizes["V"])]
    t_cum = tuple(accumulate(w[v] if transitive[v] else 0.0 for v in range(sizes["V"])))
    i_cum = tuple(accumulate(0.0 if transitive[v] else w[v] for v in range(sizes["V"])))
    return Lexicon(sizes, cum, transitive, noun_class, i_cum, t_cum)


class NounPhrase(NamedTuple):
    noun: int
    plural: bool
    definite: bool
    adjectives: tuple[int, ...]


class Sentence(NamedTuple):
    """A language-independent sentence tree (a NamedTuple: cheap to build and to hash)."""

    subject: NounPhrase
    verb: int
    past: bool
    obj: NounPhrase | None
    pp: tuple[int, NounPhrase] | None  # (preposition lemma, noun phrase)
    adverb: int | None


def _sample_np(rng: random.Random, lex: Lexicon, cfg: GrammarConfig) -> NounPhrase:
    noun = draw(rng, lex.cum["N"])
    plural = rng.random() < cfg.p_plural
    definite = rng.random() < cfg.p_definite
    adjs: list[int] = []
    while len(adjs) < cfg.max_adjectives and rng.random() < cfg.p_adjective:
        a = draw(rng, lex.cum["A"])
        if a in adjs:  # repeated adjectives are not a phrase; keep sets distinct
            break
        adjs.append(a)
    return NounPhrase(noun, plural, definite, tuple(adjs))


def sample_sentence(rng: random.Random, lex: Lexicon, cfg: GrammarConfig) -> Sentence:
    """One tree from the probabilistic grammar."""
    subject = _sample_np(rng, lex, cfg)
    has_trans = lex.transitive_cum[-1] > 0
    has_intrans = lex.intransitive_cum[-1] > 0
    if has_trans and has_intrans:
        verb = draw(rng, lex.cum["V"])
    elif has_trans:
        verb = draw(rng, lex.transitive_cum)
    else:
        verb = draw(rng, lex.intransitive_cum)
    past = rng.random() < cfg.p_past
    obj = _sample_np(rng, lex, cfg) if lex.transitive[verb] else None
    pp = None
    if rng.random() < cfg.p_pp:
        pp = (draw(rng, lex.cum["P"]), _sample_np(rng, lex, cfg))
    adverb = draw(rng, lex.cum["R"]) if rng.random() < cfg.p_adverb else None
    return Sentence(subject, verb, past, obj, pp, adverb)
