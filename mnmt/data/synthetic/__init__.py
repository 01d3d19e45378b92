"""The synthetic language family: seeded parallel data whose conditional entropy is known exactly.

Pure Python (no SeqIO, TensorFlow or JAX), so the generator and its exact irreducible loss can be
used and tested on their own. Modules:

- ``grammar``: the probabilistic grammar over a Zipf lexicon (sentence trees, stable seeds);
- ``scripts``: syllables and the three scripts (Latin, CJK-like, Devanagari-like);
- ``rendering``: a language's specification (word order, morphology, script, synonyms) and the
  rendering of a tree with the probability of every stochastic choice;
- ``languages``: each language derived from its parent proto-language (`build_language`);
- ``family``: presets, deterministic sampling streams per pair and split, and the exact
  irreducible loss L∞ of an eval set (Fernandes et al. 2023 eq. 1's bias term).
"""

from mnmt.data.synthetic.family import (
    LANGUAGES,
    RECOMMENDED_VOCAB_SIZE,
    SCALES,
    SPLITS,
    SyntheticExample,
    SyntheticFamily,
    get_family,
    irreducible_loss,
    list_presets,
)

__all__ = [
    "LANGUAGES",
    "RECOMMENDED_VOCAB_SIZE",
    "SCALES",
    "SPLITS",
    "SyntheticExample",
    "SyntheticFamily",
    "get_family",
    "irreducible_loss",
    "list_presets",
]
