"""Synthetic language family with exactly known conditional entropy (known irreducible loss).

``get_family(preset)`` builds a seeded, deterministic family: an English-like source language
and target languages of controlled relatedness (see :mod:`mnmt.data.synthetic.languages`), all
rendering trees of one probabilistic grammar over a Zipf lexicon
(:mod:`mnmt.data.synthetic.grammar`). ``family.sample(pair, split, n)`` returns examples whose
``.entropy`` is H(target | source) in nats, computed from the probabilities of the target's
stochastic choices; over a set of examples tokenized with a vocabulary this gives the
irreducible loss L∞ per target token of Fernandes et al. 2023 eq. 1 / Chen et al. 2023 eq. 4
(the bias term a model of infinite size and data would reach): Σ H_i / Σ |tokens_i|.

Presets: a scale (``tiny``, ``small``, ``base``) and a setting (``en-{de,zh}``, ``en-{de,fr}``,
``{de,zh}-en``, ``en-{de,fr,zh}``, Chen's ``en-{fr,de,zh,hi}`` …), written ``"scale:setting"``;
a bare setting means ``base``; ``cpu-tiny`` = ``tiny:en-{de,zh}``. Any list of pairs of the
family's languages (en, de, fr, zh, hi; sv, da, es, it, fi) also works: ``"tiny:en-de,de-en,en-hi"``.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from mnmt.data.synthetic.grammar import (
    GrammarConfig,
    Sentence,
    build_lexicon,
    sample_sentence,
    stable_seed,
)
from mnmt.data.synthetic.languages import Language, LanguageSpec, build_language
from mnmt.data.text_encoding import text_encoder

__all__ = [
    "SyntheticExample",
    "SyntheticFamily",
    "get_family",
    "list_presets",
    "irreducible_loss",
    "SPLITS",
    "LANGUAGES",
    "SCALES",
    "RECOMMENDED_VOCAB_SIZE",
]

SPLITS = ("train", "validation", "test", "ood")
CHUNK = 256  # examples per independently seeded chunk of a stream (random access by chunk)

# Typology of the family's languages (relatedness: en/de/fr descend from "west" with small
# mutation rates; hi from "west" with a large one; zh from an unrelated "east" parent; sv/da
# from "north", es/it from "south", fi alone from "ural").
LANGUAGES: dict[str, LanguageSpec] = {
    "en": LanguageSpec("en", "English-like", "SVO", "pre", "pre", "fusional", False, "latin",
                       "west", 0.3, synonym_rate=0.0),
    "de": LanguageSpec("de", "German-like", "SOV", "pre", "pre", "fusional", True, "latin",
                       "west", 0.35),
    "fr": LanguageSpec("fr", "French-like", "SVO", "post", "pre", "fusional", False, "latin",
                       "west", 0.35),
    "zh": LanguageSpec("zh", "Chinese-like", "SVO", "pre", "pre", "isolating", False, "cjk",
                       "east", 0.0),
    "hi": LanguageSpec("hi", "Hindi-like", "SOV", "pre", "post", "fusional", True, "deva",
                       "west", 0.8),
    # The many-pairs setting: two close relatives each of "north" and "south" (mutation 0.1:
    # siblings share ≈ 80 % of their lexicon, word order and script) and a Latin-script isolate
    # of its own parent "ural" (relatedness 0 to every other language), so that transfer from a
    # relative and from an unrelated language can be told apart.
    "sv": LanguageSpec("sv", "Swedish-like", "SVO", "pre", "pre", "fusional", False, "latin",
                       "north", 0.1),
    "da": LanguageSpec("da", "Danish-like", "SVO", "pre", "pre", "fusional", False, "latin",
                       "north", 0.1),
    "es": LanguageSpec("es", "Spanish-like", "SVO", "post", "pre", "fusional", False, "latin",
                       "south", 0.1),
    "it": LanguageSpec("it", "Italian-like", "SVO", "post", "pre", "fusional", False, "latin",
                       "south", 0.1),
    "fi": LanguageSpec("fi", "Finnish-like", "SVO", "pre", "post", "fusional", True, "latin",
                       "ural", 0.1),
}

SCALES: dict[str, GrammarConfig] = {
    # Small and flat: tiny models approach L∞ within ~1,000 CPU steps (see docs/guides/data.md).
    "tiny": (_TINY := GrammarConfig(nouns=40, verbs=20, adjectives=16, adverbs=6, prepositions=4,
                          zipf=0.7, max_adjectives=1, p_adjective=0.3, p_pp=0.25, p_adverb=0.2)),
    # Twice tiny's lexicon: more to learn, so small models are capacity-limited sooner.
    "mini": GrammarConfig(nouns=90, verbs=45, adjectives=36, adverbs=12, prepositions=6,
                          zipf=0.8, max_adjectives=1, p_adjective=0.3, p_pp=0.25, p_adverb=0.2),
    # tiny plus collocation particles: the targets mark each verb with one of 8 particles chosen
    # by a random table of (verb, subject noun) — 800 entries that small models cannot all hold.
    "tiny-colloc": replace(_TINY, collocations=8),
    "small": GrammarConfig(nouns=300, verbs=150, adjectives=120, adverbs=40, prepositions=8,
                           zipf=1.0, max_adjectives=2, p_adjective=0.35, p_pp=0.35, p_adverb=0.25),
    # The scale of the first CPU experiment, before this project (~2,600 content lemmas).
    "base": GrammarConfig(nouns=1200, verbs=650, adjectives=550, adverbs=200, prepositions=12,
                          zipf=1.05, max_adjectives=2, p_adjective=0.35, p_pp=0.4, p_adverb=0.3),
}

# Synonym settings per scale for target languages: (synonym_rate, max_synonyms).
_SCALE_SYNONYMS = {"tiny": (0.8, 2), "tiny-colloc": (0.8, 2), "mini": (0.8, 2), "small": (0.5, 3), "base": (0.5, 3)}

# setting → (pairs, training sizes D_i in examples or None = unlimited stream)
SETTINGS: dict[str, tuple[tuple[str, ...], dict[str, int] | None]] = {
    "en-{de,zh}": (("en-de", "en-zh"), None),
    "en-{de,fr}": (("en-de", "en-fr"), None),
    "{de,zh}-en": (("de-en", "zh-en"), None),
    "en-{de,fr,zh}": (("en-de", "en-fr", "en-zh"), None),
    # Chen et al. 2023 (§2.2, App. A): WMT sizes of the 4-direction setting.
    "en-{fr,de,zh,hi}": (("en-fr", "en-de", "en-zh", "en-hi"),
                         {"en-fr": 10_000_000, "en-de": 4_600_000, "en-zh": 260_000,
                          "en-hi": 260_000}),
    # Chen's two-direction High-Low settings (Fig. 2 / §3.2).
    "en-{fr,de}-lowres": (("en-fr", "en-de"), {"en-fr": 10_000_000, "en-de": 260_000}),
    "en-{de,hi}": (("en-de", "en-hi"), {"en-de": 4_600_000, "en-hi": 260_000}),
    "en-{fr,zh}-lowres": (("en-fr", "en-zh"), {"en-fr": 10_000_000, "en-zh": 260_000}),
    # K = 5 with known relatedness (LANGUAGES: sv~da, es~it, fi an isolate): in each pair of
    # relatives one larger and one small dataset, so a low-resource pair can borrow from its
    # relative (tiny: 6,000 / 800 / 6,000 / 800 / 2,000 training examples).
    "en-{sv,da,es,it,fi}": (("en-sv", "en-da", "en-es", "en-it", "en-fi"),
                            {"en-sv": 6_000_000, "en-da": 800_000, "en-es": 6_000_000,
                             "en-it": 800_000, "en-fi": 2_000_000}),
}
# Shared vocabulary sizes (per 3 languages) at which most word forms are single pieces
# (cpu-tiny: 753 word types in en/de/zh; at 512 pieces de targets split into ~2 pieces per word
# and 2% exceed 32 tokens; tiny with 5 languages: 1,465 types → 2048).
RECOMMENDED_VOCAB_SIZE = {"tiny": 1024, "tiny-colloc": 1024, "mini": 2048, "small": 4096, "base": 16384}
# Data sizes shrink with the scale so the low-resource regime stays low-resource for tiny models.
_SIZE_DIVISOR = {"tiny": 1000, "tiny-colloc": 1000, "mini": 500, "small": 100, "base": 1}
ALIASES = {"cpu-tiny": "tiny:en-{de,zh}", "cpu-mini": "mini:en-{de,zh}",
           "cpu-colloc": "tiny-colloc:en-{de,zh}"}


@dataclass(frozen=True, slots=True)
class SyntheticExample:
    """One parallel sentence; ``entropy`` = H(target | source) in nats (exact)."""

    source: str
    target: str
    entropy: float
    logprob: float  # log p(target | source) under the generator
    tree: Sentence = field(compare=False, repr=False)


@dataclass
class SyntheticFamily:
    """A built family: its languages, pairs, and deterministic sampling streams."""

    preset: str
    seed: int
    grammar: GrammarConfig
    languages: dict[str, Language]
    pairs: list[str]
    train_sizes: dict[str, int] | None
    _ood_lexicon: Any = field(repr=False, default=None)
    _ood_grammar: GrammarConfig | None = field(repr=False, default=None)
    recommended_vocab_size: int = 1024  # whole words mostly one piece; no trimming at length 32

    def _langs(self, pair: str) -> tuple[Language, Language]:
        if pair not in self.pairs:
            raise ValueError(
                f"unknown pair {pair!r} for preset {self.preset!r}: expected one of {self.pairs}"
            )
        src, tgt = pair.split("-")
        return self.languages[src], self.languages[tgt]

    def iter_examples(
        self, pair: str, split: str, start: int = 0, seed: int | None = None
    ) -> Iterator[SyntheticExample]:
        """The endless deterministic stream of ``split`` from index ``start`` on.

        Example i depends only on (family seed, pair, split, ``seed``, i // CHUNK), so a stream
        can be resumed at any index without replaying it.
        """
        for tree, s_text, t_text, logp, ent in self._stream(pair, split, start, seed):
            yield SyntheticExample(s_text, t_text, ent, logp, tree)

    def iter_texts(
        self, pair: str, split: str, start: int = 0, seed: int | None = None
    ) -> Iterator[tuple[str, str]]:
        """(source, target) strings of the same stream as :meth:`iter_examples` (faster)."""
        for _, s_text, t_text, _, _ in self._stream(pair, split, start, seed):
            yield s_text, t_text

    def _stream(self, pair: str, split: str, start: int, seed: Any):
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}: expected one of {SPLITS}")
        if start < 0:
            raise ValueError(f"start must be >= 0, got {start}")
        src, tgt = self._langs(pair)
        if split == "ood":
            lex, cfg = self._ood_lexicon, self._ood_grammar
        else:
            lex, cfg = src.lex, self.grammar
        chunk = start // CHUNK
        skip = start - chunk * CHUNK
        s_render, t_render = src.render, tgt.render
        while True:
            rng = random.Random(stable_seed(self.seed, pair, split, seed, chunk))
            for j in range(CHUNK):
                tree = sample_sentence(rng, lex, cfg)
                s_text = s_render(tree, rng)[0]
                t_text, logp, ent = t_render(tree, rng)
                if j >= skip:
                    yield tree, s_text, t_text, logp, ent
            skip = 0
            chunk += 1

    def sample(
        self, pair: str, split: str, n: int, seed: int | None = None, start: int = 0
    ) -> list[SyntheticExample]:
        """``n`` examples of ``split`` (examples ``start`` … ``start + n - 1`` of the stream)."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        it = self.iter_examples(pair, split, start=start, seed=seed)
        return [next(it) for _ in range(n)]

    def log_prob(self, pair: str, example: SyntheticExample, target: str | None = None) -> float:
        """log p(target | source) under the generator (``target`` defaults to the example's)."""
        _, tgt = self._langs(pair)
        return tgt.log_prob(example.tree, example.target if target is None else target)

    def texts(self, n_per_pair: int, seed: int = 0) -> list[str]:
        """A balanced sample of both sides of every pair (for vocabulary training)."""
        out: list[str] = []
        for pair in self.pairs:
            for ex in self.sample(pair, "train", n_per_pair, seed=("vocab", seed)):
                out.append(ex.source)
                out.append(ex.target)
        return out

    def language_codes(self) -> list[str]:
        return sorted(self.languages)

    def target_languages(self) -> list[str]:
        return sorted({p.split("-")[1] for p in self.pairs})

    def relatedness(self, a: str, b: str) -> float:
        """Share of lemmas whose forms both languages inherited from one common parent."""
        la, lb = self.languages[a], self.languages[b]
        if la.spec.parent != lb.spec.parent:
            return 0.0
        both = total = 0
        for cat, flags in la.inherited.items():
            for x, y in zip(flags, lb.inherited[cat], strict=True):
                both += x and y
                total += 1
        return both / total


def list_presets() -> list[str]:
    """All preset names (aliases, then scale:setting)."""
    return list(ALIASES) + [f"{sc}:{st}" for sc in SCALES for st in SETTINGS]


def _parse_preset(preset: str) -> tuple[str, tuple[str, ...], dict[str, int] | None]:
    """'cpu-tiny' | 'scale:setting' | 'scale:xx-yy,zz-ww' (explicit pairs) → parts."""
    if not isinstance(preset, str):
        raise ValueError(f"synthetic preset: expected a string, got {preset!r}")
    name = ALIASES.get(preset, preset)
    scale, _, setting = name.rpartition(":")
    scale = scale or "base"
    expected = (f"expected 'cpu-tiny' or 'scale:setting' with scale in {sorted(SCALES)} and "
                f"setting in {sorted(SETTINGS)} or a comma-separated list of pairs such as "
                "'tiny:en-de,de-en'")
    if scale not in SCALES:
        raise ValueError(f"unknown synthetic preset {preset!r}: {expected}")
    if setting in SETTINGS:
        pairs, sizes = SETTINGS[setting]
        return scale, pairs, sizes
    pairs = tuple(p.strip() for p in setting.split(",") if p.strip())
    if not pairs or any(p.count("-") != 1 for p in pairs):
        raise ValueError(f"unknown synthetic preset {preset!r}: {expected}")
    for p in pairs:
        src, tgt = p.split("-")
        for code in (src, tgt):
            if code not in LANGUAGES:
                raise ValueError(
                    f"synthetic preset {preset!r}: unknown language code {code!r} in pair {p!r}; "
                    f"expected one of {sorted(LANGUAGES)}"
                )
        if src == tgt:
            raise ValueError(f"synthetic preset {preset!r}: pair {p!r} translates a language into itself")
    if len(set(pairs)) != len(pairs):
        raise ValueError(f"synthetic preset {preset!r}: repeated pairs in {list(pairs)}")
    return scale, pairs, None


@lru_cache(maxsize=32)
def get_family(preset: str, seed: int = 0, **overrides: Any) -> SyntheticFamily:
    """Build (and cache) the family of a named preset; see the module docstring.

    ``overrides`` may replace ``grammar`` (a GrammarConfig) or ``languages`` (a tuple of
    LanguageSpec) for experiments beyond the presets.
    """
    scale, pairs, sizes = _parse_preset(preset)
    grammar: GrammarConfig = overrides.get("grammar", SCALES[scale])
    lex = build_lexicon(grammar, seed)
    codes = sorted({c for p in pairs for c in p.split("-")})
    syn_rate, syn_max = _SCALE_SYNONYMS[scale]
    targets = {p.split("-")[1] for p in pairs}
    specs: dict[str, LanguageSpec] = {}
    for code in codes:
        spec = LANGUAGES[code]
        if code in targets or code != "en":
            spec = replace(spec, synonym_rate=syn_rate, max_synonyms=syn_max)
        if code in targets and grammar.collocations:
            spec = replace(spec, collocations=grammar.collocations)
        specs[code] = spec
    for spec in overrides.get("languages", ()):
        specs[spec.code] = spec
    languages = {c: build_language(s, lex, seed) for c, s in specs.items()}
    ood_grammar = replace(
        grammar, zipf=grammar.zipf * 0.4, p_adjective=min(1.0, grammar.p_adjective * 1.6),
        p_pp=min(1.0, grammar.p_pp * 1.6), p_adverb=min(1.0, grammar.p_adverb * 1.6),
        p_plural=0.5, p_past=0.5,
    )
    ood_lex = build_lexicon(ood_grammar, seed)
    if sizes is not None:
        sizes = {p: max(1, n // _SIZE_DIVISOR[scale]) for p, n in sizes.items()}
    vocab = RECOMMENDED_VOCAB_SIZE[scale] * math.ceil(len(languages) / 3)
    return SyntheticFamily(preset, seed, grammar, languages, list(pairs), sizes, ood_lex, ood_grammar,
                           vocab)


def irreducible_loss(
    family: SyntheticFamily,
    pair: str,
    split: str,
    vocab: Any,
    n: int,
    *,
    seed: int | None = None,
    add_eos: bool = True,
    max_length: int | None = None,
) -> float:
    """Exact L∞ in nats per target token of the first ``n`` examples of ``split``.

    L∞ = Σ_i H(t_i | s_i) / Σ_i |tokens(t_i)| (+1 EOS per example when ``add_eos``), the loss
    a model equal to the generator would reach on this set: the bias term of Fernandes et al.
    2023 eq. 1 / Chen et al. 2023 eq. 4. ``vocab`` is a seqio vocabulary, a SentencePiece
    processor, or a path to a ``.model`` file. Use the same ``seed`` as the eval split.
    With ``max_length`` (the targets feature length) it warns when targets would be trimmed:
    a trimmed example's loss no longer matches its entropy.
    """
    examples = family.sample(pair, split, n, seed=seed)
    return _loss_per_token(examples, vocab, add_eos, max_length)


def _encoder(vocab: Any):
    """Texts → ids for counting target tokens, by the one rule
    (:func:`mnmt.data.text_encoding.text_encoder`); ``vocab`` a SentencePiece model path, a
    ``seqio.SentencePieceVocabulary`` or a SentencePiece processor."""
    if isinstance(vocab, str):
        import sentencepiece as spm

        vocab = spm.SentencePieceProcessor(model_file=vocab)
    if hasattr(vocab, "tokenizer") or hasattr(vocab, "Encode"):
        enc = text_encoder(vocab)
        return lambda texts: [enc(t) for t in texts]
    raise TypeError(f"cannot tokenize with {type(vocab).__name__}: expected a vocabulary")


def _loss_per_token(
    examples: Sequence[SyntheticExample], vocab: Any, add_eos: bool, max_length: int | None = None
) -> float:
    if not examples:
        raise ValueError("irreducible_loss: need at least one example (n > 0)")
    ids = _encoder(vocab)([e.target for e in examples])
    tokens = sum(len(x) for x in ids) + (len(examples) if add_eos else 0)
    if max_length is not None:
        over = sum(len(x) + add_eos > max_length for x in ids)
        if over:
            warnings.warn(
                f"irreducible_loss: {over} of {len(ids)} targets exceed {max_length} tokens and "
                "will be trimmed in evaluation; use a larger vocabulary or feature length",
                stacklevel=3,
            )
    return math.fsum(e.entropy for e in examples) / tokens


def mean_entropy(examples: Sequence[SyntheticExample]) -> float:
    """Mean H(target | source) in nats per sentence."""
    return math.fsum(e.entropy for e in examples) / max(1, len(examples))


def pair_stats(family: SyntheticFamily, pair: str, n: int = 2000) -> Mapping[str, float]:
    """Quick descriptive numbers of a pair (words per side, nats per sentence)."""
    ex = family.sample(pair, "validation", n)
    src_words = sum(len(family.languages[pair.split("-")[0]].split_words(e.source)) for e in ex)
    tgt_words = sum(len(family.languages[pair.split("-")[1]].split_words(e.target)) for e in ex)
    return {
        "source_words": src_words / n,
        "target_words": tgt_words / n,
        "entropy_per_sentence": mean_entropy(ex),
    }
