"""The many-pairs setting of the synthetic family: five targets of known relatedness (two pairs
of close relatives and an isolate), with finite per-pair data, and the older languages unchanged."""

import math

import pytest

from mnmt.data.synthetic import LANGUAGES, RECOMMENDED_VOCAB_SIZE, get_family, list_presets

SETTING = "en-{sv,da,es,it,fi}"
RELATIVES = (("sv", "da"), ("es", "it"))
TARGETS = ("sv", "da", "es", "it", "fi")


@pytest.fixture(scope="module")
def family():
    return get_family(f"tiny:{SETTING}")


def test_the_setting_is_a_preset_with_five_capped_pairs(family):
    assert f"tiny:{SETTING}" in list_presets()
    assert family.pairs == [f"en-{t}" for t in TARGETS]
    assert family.train_sizes == {"en-sv": 6000, "en-da": 800, "en-es": 6000, "en-it": 800,
                                  "en-fi": 2000}
    # six languages: the vocabulary rule of the family
    assert family.recommended_vocab_size == RECOMMENDED_VOCAB_SIZE["tiny"] * math.ceil(6 / 3)


def test_relatives_are_related_and_the_isolate_is_not(family):
    related = [family.relatedness(a, b) for a, b in RELATIVES]
    assert all(r > 0.7 for r in related)
    unrelated = [family.relatedness(a, b) for a in TARGETS for b in TARGETS
                 if a != b and (a, b) not in RELATIVES and (b, a) not in RELATIVES]
    assert unrelated and all(r == 0.0 for r in unrelated)
    assert min(related) > max(unrelated)
    assert all(family.relatedness("fi", t) == 0.0 for t in TARGETS if t != "fi")
    assert all(family.relatedness("en", t) == 0.0 for t in TARGETS)


def test_relatives_share_surface_words_and_the_isolate_shares_none(family):
    """What a model can transfer: the relatives' targets use the same word forms."""
    def words(code):
        ex = family.sample(f"en-{code}", "validation", 300)
        return {w for e in ex for w in e.target.split()}

    vocab = {code: words(code) for code in TARGETS}
    # (inflected forms differ: each language has its own suffixes, function words and synonyms)
    shared = {(a, b): len(vocab[a] & vocab[b]) / len(vocab[a]) for a in TARGETS for b in TARGETS}
    for a, b in RELATIVES:
        assert shared[a, b] > 0.1 and shared[b, a] > 0.1
    for other in ("sv", "da", "es", "it"):
        assert shared["fi", other] < 0.03
        assert shared["fi", other] * 5 < min(shared[a, b] for a, b in RELATIVES)


def test_the_new_targets_have_exact_entropy(family):
    for code in TARGETS:
        lang = family.languages[code]
        for e in family.sample(f"en-{code}", "validation", 50):
            assert lang.log_prob(e.tree, e.target) == pytest.approx(e.logprob)
            assert e.entropy == pytest.approx(lang.entropy(e.tree))


def test_the_older_languages_are_unchanged():
    assert {"en", "de", "fr", "zh", "hi"} <= set(LANGUAGES)
    assert LANGUAGES["de"].parent == "west" and LANGUAGES["zh"].parent == "east"
    parents = {LANGUAGES[c].parent for c in TARGETS}
    assert parents == {"north", "south", "ural"}
    old = get_family("cpu-tiny")
    assert old.recommended_vocab_size == 1024 and sorted(old.languages) == ["de", "en", "zh"]
