"""mnmt.data: SeqIO tasks and mixtures, shared vocabulary, synthetic language family.

Submodules (import them directly; this package imports nothing heavy):
- ``synthetic`` (+ ``synthetic_grammar``, ``synthetic_languages``): seeded generator with exact
  conditional entropy (known irreducible loss), presets ``cpu-tiny`` and the papers' settings;
- ``vocab``: shared SentencePiece model with ``<2xx>`` language pieces (``mnmt-vocab``);
- ``tasks``: seqio task registration; ``mixtures``: weights, temperature/oversampling, grids;
- ``pipeline``: resumable training iterator and evaluation batches.
"""
