"""The synthetic family: determinism, exact entropy, unique strings, recoverable trees."""

import itertools
import math
from collections import defaultdict

import pytest

from mnmt.data.synthetic import get_family, irreducible_loss, list_presets


@pytest.fixture(scope="module")
def tiny():
    return get_family("cpu-tiny")


def test_pairs_and_determinism(tiny):
    assert tiny.pairs == ["en-de", "en-zh"]
    a = tiny.sample("en-de", "train", 50)
    b = get_family("cpu-tiny").sample("en-de", "train", 50)
    assert [(e.source, e.target) for e in a] == [(e.source, e.target) for e in b]
    c = tiny.sample("en-de", "train", 50, seed=1)
    assert [e.target for e in a] != [e.target for e in c]
    v = tiny.sample("en-de", "validation", 50)
    assert [e.source for e in a] != [e.source for e in v]


def test_random_access_matches_sequential_stream(tiny):
    full = tiny.sample("en-zh", "train", 600)
    part = tiny.sample("en-zh", "train", 10, start=590)
    assert [(e.source, e.target) for e in part] == [(e.source, e.target) for e in full[590:]]


def _enumerate_targets(lang, tree):
    """All target strings of a tree with their probabilities (brute force over choices)."""
    options = []
    for ch in lang.slots(tree):
        probs = [math.exp(lp) for lp in ch.logp] if len(ch.forms) > 1 else [1.0]
        options.append(list(zip(ch.forms, probs, strict=True)))
    out = []
    for combo in itertools.product(*options):
        words = [w for w, _ in combo]
        out.append((lang._join(words), math.prod(p for _, p in combo)))
    return out


@pytest.mark.parametrize("preset,pair", [
    ("cpu-tiny", "en-de"), ("cpu-tiny", "en-zh"), ("tiny:{de,zh}-en", "zh-en"),
    ("tiny:en-{fr,de,zh,hi}", "en-hi"), ("tiny:en-{de,fr}", "en-fr"),
    ("cpu-colloc", "en-de"), ("cpu-colloc", "en-zh"),
])
def test_entropy_is_exact_and_strings_are_distinct(preset, pair):
    fam = get_family(preset)
    tgt = fam.languages[pair.split("-")[1]]
    checked = 0
    for ex in fam.sample(pair, "validation", 300):
        outcomes = _enumerate_targets(tgt, ex.tree)
        if len(outcomes) > 5000:
            continue
        strings = [s for s, _ in outcomes]
        # distinct choice sequences give distinct strings → string entropy = choice entropy
        assert len(set(strings)) == len(strings)
        assert math.isclose(sum(p for _, p in outcomes), 1.0, rel_tol=1e-9)
        h = -sum(p * math.log(p) for _, p in outcomes if p > 0)
        assert math.isclose(h, ex.entropy, rel_tol=1e-9, abs_tol=1e-12)
        assert ex.target in strings
        assert math.isclose(fam.log_prob(pair, ex), ex.logprob, abs_tol=1e-9)
        checked += 1
    assert checked > 200


@pytest.mark.parametrize("preset,pair", [
    ("cpu-tiny", "en-zh"), ("tiny:{de,zh}-en", "zh-en"), ("tiny:{de,zh}-en", "de-en"),
    ("tiny:en-{fr,de,zh,hi}", "en-hi"),
])
def test_source_string_determines_the_tree(preset, pair):
    """H(T|S) = H(T|tree) needs the tree to be a function of the source string."""
    fam = get_family(preset)
    trees = defaultdict(set)
    for ex in fam.sample(pair, "train", 4000):
        trees[ex.source].add(ex.tree)
    assert all(len(t) == 1 for t in trees.values())
    # and the corpus really repeats sources (else the check would be vacuous)
    assert len(trees) < 4000


@pytest.mark.parametrize("preset,pair", [("cpu-tiny", "en-de"), ("cpu-tiny", "en-zh"),
                                         ("cpu-colloc", "en-de"), ("cpu-colloc", "en-zh")])
def test_generator_nll_matches_entropy_on_held_out(preset, pair):
    """Mean −log p(target | source) of held-out targets ≈ mean conditional entropy (CLT)."""
    tiny = get_family(preset)
    ex = tiny.sample(pair, "test", 4000)
    nll = [-tiny.log_prob(pair, e) for e in ex]  # recomputed from the strings
    ent = [e.entropy for e in ex]
    n = len(ex)
    mean_nll, mean_h = sum(nll) / n, sum(ent) / n
    diff = [a - b for a, b in zip(nll, ent, strict=False)]
    sd = math.sqrt(sum(d * d for d in diff) / n - (sum(diff) / n) ** 2)
    assert mean_h > 0.3
    assert abs(mean_nll - mean_h) < 4 * sd / math.sqrt(n)
    # a wrong target has probability zero under the generator
    assert tiny.log_prob(pair, ex[0], ex[1].target) == -math.inf or ex[0].tree == ex[1].tree


def test_both_directions_have_entropy():
    fam = get_family("tiny:{de,zh}-en")
    for pair in fam.pairs:
        ex = fam.sample(pair, "validation", 500)
        assert sum(e.entropy for e in ex) / 500 > 0.2


def test_relatedness_controlled_by_parent_and_mutation():
    fam = get_family("tiny:en-{de,fr,zh}")
    assert fam.relatedness("de", "fr") > 0.3
    assert fam.relatedness("en", "de") > 0.3
    assert fam.relatedness("de", "zh") == 0.0
    assert fam.relatedness("en", "zh") == 0.0


def test_relatedness_tracks_the_mutation_rate():
    """Controlled relatedness: two children of one parent keep a lemma with prob. 1 − m each,
    so their shared-inheritance share falls with m, near (1 − m)² (a few kept forms collide
    with other words and are replaced, hence slightly below)."""
    from dataclasses import replace

    from mnmt.data.synthetic import LANGUAGES

    shares, with_en = [], []
    for m in (0.0, 0.2, 0.5, 0.8):
        de = replace(LANGUAGES["de"], mutation=m)
        fr = replace(LANGUAGES["fr"], mutation=m)
        fam = get_family("small:en-{de,fr}", languages=(de, fr))
        r = fam.relatedness("de", "fr")
        assert abs(r - (1 - m) ** 2) < 0.1, (m, r)
        shares.append(r)
        with_en.append(fam.relatedness("en", "de"))
    assert shares == sorted(shares, reverse=True) and shares[0] - shares[-1] > 0.8
    assert with_en == sorted(with_en, reverse=True)
    # a language of another parent shares nothing whatever its mutation rate
    zh = replace(LANGUAGES["zh"], mutation=0.0)
    assert get_family("tiny:en-de,en-zh", languages=(zh,)).relatedness("de", "zh") == 0.0


# The papers' settings: setting -> pairs, and Chen et al. 2023 §2.2 / App. A sizes.
PAPER_SETTINGS = {
    "en-{de,zh}": ["en-de", "en-zh"],
    "en-{de,fr}": ["en-de", "en-fr"],
    "{de,zh}-en": ["de-en", "zh-en"],
    "en-{de,fr,zh}": ["en-de", "en-fr", "en-zh"],
    "en-{fr,de,zh,hi}": ["en-fr", "en-de", "en-zh", "en-hi"],
}
CHEN_SIZES = {"en-fr": 10_000_000, "en-de": 4_600_000, "en-zh": 260_000, "en-hi": 260_000}


@pytest.mark.parametrize("setting", sorted(PAPER_SETTINGS))
def test_every_paper_setting_is_a_preset_with_its_pairs(setting):
    for scale in ("tiny", "mini", "small", "base"):
        assert f"{scale}:{setting}" in list_presets()
    fam = get_family(f"tiny:{setting}")
    assert fam.pairs == PAPER_SETTINGS[setting]
    for pair in fam.pairs:
        src, tgt = pair.split("-")
        ex = fam.sample(pair, "validation", 200)
        # the target side is stochastic (known entropy), the source side is the tree's rendering
        assert sum(e.entropy for e in ex) / len(ex) > 0.2
        assert all(e.source and e.target and e.source != e.target for e in ex)
        # direction: the CJK-like language is written without spaces, on whichever side it is
        for side, code in ((lambda e: e.source, src), (lambda e: e.target, tgt)):
            long = [side(e) for e in ex if len(side(e)) > 12]  # several words
            assert len(long) > 20
            assert all((" " in t) == (code != "zh") for t in long)
    if setting == "en-{fr,de,zh,hi}":
        assert fam.train_sizes == {p: n // 1000 for p, n in CHEN_SIZES.items()}
    else:
        assert fam.train_sizes is None  # data-rich regime: unlimited streams


@pytest.mark.parametrize("scale,divisor", [("tiny", 1000), ("mini", 500), ("small", 100)])
def test_chen_sizes_scale_down_with_the_lexicon(scale, divisor):
    fam = get_family(f"{scale}:en-{{fr,de,zh,hi}}")
    assert fam.train_sizes == {p: n // divisor for p, n in CHEN_SIZES.items()}
    lowres = get_family(f"{scale}:en-{{fr,de}}-lowres")
    assert lowres.train_sizes == {"en-fr": 10_000_000 // divisor, "en-de": 260_000 // divisor}


@pytest.mark.parametrize("split,exponent", [("train", 1.0), ("ood", 0.4)])
def test_lemma_frequencies_follow_the_configured_zipf_law(split, exponent):
    """p(rank r) ∝ (r + 1)^(-s) within a part of speech (small: s = 1.0; ood flattens it × 0.4)."""
    import numpy as np

    fam = get_family("small:en-{de,zh}")
    n = 20000
    nouns = np.array([e.tree.subject.noun for e in fam.sample("en-de", split, n)])
    size = fam.grammar.nouns
    assert nouns.min() >= 0 and nouns.max() < size
    counts = np.bincount(nouns, minlength=size)
    expected = (np.arange(size) + 1.0) ** -exponent
    expected /= expected.sum()
    top = 20  # well-populated ranks: frequency within 4 binomial standard deviations
    sd = np.sqrt(n * expected[:top] * (1 - expected[:top]))
    assert np.all(np.abs(counts[:top] - n * expected[:top]) < 4 * sd)
    slope = np.polyfit(np.log(np.arange(1, top + 1)), np.log(counts[:top]), 1)[0]
    assert abs(slope + exponent) < 0.15


def test_lexicon_size_is_configurable():
    from dataclasses import replace

    from mnmt.data.synthetic import SCALES

    grammar = replace(SCALES["tiny"], nouns=7, verbs=5)
    fam = get_family("tiny:en-de", grammar=grammar)
    trees = [e.tree for e in fam.sample("en-de", "train", 3000)]
    assert {t.subject.noun for t in trees} == set(range(7))
    assert {t.verb for t in trees} == set(range(5))
    de = fam.languages["de"]
    assert len(de.content["N"]) == 7 and len(de.content["V"]) == 5


def test_ood_split_is_differently_distributed(tiny):
    val = tiny.sample("en-de", "validation", 2000)
    ood = tiny.sample("en-de", "ood", 2000)
    words = lambda xs: sum(len(e.source.split()) for e in xs) / len(xs)  # noqa: E731
    assert words(ood) > words(val) + 0.5


def test_presets_build_and_unknown_preset_is_an_error():
    names = list_presets()
    assert "cpu-tiny" in names and "base:en-{fr,de,zh,hi}" in names
    chen = get_family("en-{fr,de,zh,hi}")
    assert chen.train_sizes == {"en-fr": 10_000_000, "en-de": 4_600_000, "en-zh": 260_000,
                                "en-hi": 260_000}
    with pytest.raises(ValueError, match="unknown synthetic preset"):
        get_family("huge:en-{de,zh}")
    with pytest.raises(ValueError, match="unknown language code 'xx'"):
        get_family("tiny:en-de,en-xx")
    with pytest.raises(ValueError, match="into itself"):
        get_family("tiny:de-de")
    custom = get_family("tiny:en-de,de-en")
    assert custom.pairs == ["en-de", "de-en"] and custom.train_sizes is None
    with pytest.raises(ValueError, match="unknown pair"):
        get_family("cpu-tiny").sample("en-fr", "train", 1)
    with pytest.raises(ValueError, match="unknown split"):
        get_family("cpu-tiny").sample("en-de", "dev", 1)


def test_irreducible_loss_definition(tiny, tiny_vocab):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=tiny_vocab)
    ex = tiny.sample("en-de", "validation", 500)
    expected = sum(e.entropy for e in ex) / sum(len(sp.encode(e.target)) + 1 for e in ex)
    got = irreducible_loss(tiny, "en-de", "validation", tiny_vocab, 500)
    assert math.isclose(got, expected, rel_tol=1e-12)
    assert 0.05 < got < 0.6


def test_irreducible_loss_warns_when_targets_would_be_trimmed(tiny, tiny_vocab):
    with pytest.warns(UserWarning, match="exceed 5 tokens"):
        irreducible_loss(tiny, "en-de", "validation", tiny_vocab, 50, max_length=5)


def test_function_word_variants_add_exact_entropy():
    from dataclasses import replace

    from mnmt.data.synthetic import LANGUAGES

    base = get_family("tiny:en-de")
    de = replace(LANGUAGES["de"], synonym_rate=0.0, function_synonym_rate=1.0)
    fam = get_family("tiny:en-de", languages=(de,))
    lang = fam.languages["de"]
    assert all(len(ch.forms) == 2 for k, ch in lang.function.items() if k.startswith("det."))
    ex = fam.sample("en-de", "validation", 300)
    assert sum(e.entropy for e in ex) > 0  # all entropy comes from determiner variants now
    for e in ex[:100]:
        outcomes = _enumerate_targets(lang, e.tree)
        assert len({s for s, _ in outcomes}) == len(outcomes)
        h = -sum(p * math.log(p) for _, p in outcomes)
        assert math.isclose(h, e.entropy, abs_tol=1e-9)
    assert base.languages["de"].function["det.def.sg.nom"].entropy == 0.0


def test_cpu_tiny_data_is_frozen():
    """cpu-tiny streams must not change silently: studies cache vocabularies and L∞ computed
    from them. If a deliberate change alters this digest, update it and say so in the log."""
    import hashlib

    fam = get_family("cpu-tiny")
    h = hashlib.sha256()
    for pair in fam.pairs:
        for split in ("train", "validation", "ood"):
            for e in fam.sample(pair, split, 200):
                h.update((e.source + "\t" + e.target + "\n").encode())
    assert h.hexdigest()[:16] == "51ce2b9d932e725e"


@pytest.mark.parametrize("pair", ["en-de", "en-zh"])
def test_collocation_particle_is_a_fixed_table_of_verb_and_subject(pair):
    """cpu-colloc adds to cpu-tiny one particle after the verb, chosen by a random table of
    (verb, subject noun): a function of the tree (so the entropy is unchanged) that varies with
    both lemmas and uses every particle."""
    base, colloc = get_family("cpu-tiny"), get_family("cpu-colloc")
    tgt = colloc.languages[pair.split("-")[1]]
    particles = {ch.forms[0]: k for k, ch in tgt.function.items() if k.startswith("col.")}
    assert len(particles) == 8
    seen: dict[tuple[int, int], str] = {}
    for b, c in zip(base.sample(pair, "train", 3000), colloc.sample(pair, "train", 3000),
                    strict=True):
        assert b.tree == c.tree and b.source == c.source and b.entropy == c.entropy
        extra = [w for w in tgt.split_words(c.target) if w in particles]
        assert len(extra) == 1
        key = (c.tree.verb, c.tree.subject.noun)
        assert seen.setdefault(key, extra[0]) == extra[0]  # the same pair, the same particle
        words = tgt.split_words(c.target)
        words.remove(extra[0])
        assert tgt._join(words) == b.target  # cpu-tiny's target with the particle added
    assert set(seen.values()) == set(particles)
    by_verb = defaultdict(set)
    for (verb, _), w in seen.items():
        by_verb[verb].add(w)
    assert max(len(ws) for ws in by_verb.values()) > 1  # the subject matters, not the verb alone
    # a wrong particle has probability zero
    ex = colloc.sample(pair, "validation", 1)[0]
    right = [w for w in tgt.split_words(ex.target) if w in particles][0]
    wrong = next(w for w in particles if w != right)
    bad = tgt._join([wrong if w == right else w for w in tgt.split_words(ex.target)])
    assert colloc.log_prob(pair, ex, bad) == -math.inf


def test_collocations_are_validated():
    from dataclasses import replace

    from mnmt.data.synthetic import LANGUAGES, SCALES

    with pytest.raises(ValueError, match="collocations: expected 0..64"):
        replace(SCALES["tiny"], collocations=-1).validate()
    with pytest.raises(ValueError, match=r"LanguageSpec\(de\).collocations"):
        replace(LANGUAGES["de"], collocations=65).validate()
