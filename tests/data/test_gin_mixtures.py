"""Gin-configured mixtures: the shipped t5x_configs/data/*.gin files parse and register."""

import os

import gin
import pytest

from mnmt.data import mixtures
from mnmt.data.gin_mixtures import register_configured_mixtures

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "t5x_configs", "data")


@pytest.fixture(autouse=True)
def _clean_gin():
    gin.clear_config()
    yield
    gin.clear_config()


def _parse(fn, vocab, extra=()):
    # `setup_tasks` belongs to the trainer; skip unknown configurables for this data-only test.
    gin.parse_config_files_and_bindings(
        [os.path.join(CONFIGS, fn)], [f"VOCABULARY_PATH = '{vocab}'", *extra],
        skip_unknown=True,
    )


def test_two_pair_gin_gives_p_and_one_minus_p(tiny_vocab):
    _parse("two_pair_weights.gin", tiny_vocab, ["P = 0.3"])
    (name,) = register_configured_mixtures()
    w = mixtures.mixture_weights(name)
    assert sorted(w.values()) == pytest.approx([0.3, 0.7])
    assert [v for k, v in w.items() if k.endswith("en_de")] == [pytest.approx(0.3)]


def test_chen_temperature_gin(tmp_path):
    from fitting.data.sampling import temperature_weights
    from mnmt.data.synthetic import get_family
    from mnmt.data.vocab import train_vocabulary

    fam = get_family("tiny:en-{fr,de,zh,hi}")
    vocab = train_vocabulary(fam, str(tmp_path), 400, n_per_pair=300)
    _parse("chen_temperature.gin", vocab)
    (name,) = register_configured_mixtures()
    w = list(mixtures.mixture_weights(name).values())
    sizes = [fam.train_sizes[p] for p in fam.pairs]  # 10000, 4600, 260, 260
    assert w == pytest.approx(list(temperature_weights(sizes, 5)))
    # Chen et al. 2023's worked example: 10M/4.6M/0.26M/0.26M at T = 5 (p ∝ n^{1/T} is
    # invariant to the ÷1000 scaling of the tiny preset)
    assert w == pytest.approx([0.355, 0.304, 0.171, 0.171], abs=1.5e-3)


def test_exactly_one_weighting_is_required(tiny_vocab):
    from mnmt.data.gin_mixtures import mixture

    with pytest.raises(ValueError, match="exactly one"):
        mixture(name="x", preset="cpu-tiny", vocabulary_path=tiny_vocab, p=0.5, temperature=2)
    with pytest.raises(ValueError, match="unknown pairs"):
        mixture(name="x", preset="cpu-tiny", vocabulary_path=tiny_vocab, weights={"en-fr": 1})
