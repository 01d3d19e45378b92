"""mnmt.data: SeqIO tasks and mixtures, shared vocabulary, and where the text comes from.

Subpackages and modules (import them directly; this package imports nothing heavy):
- ``synthetic/``: the seeded language family with exact conditional entropy (known irreducible
  loss); pure Python, no SeqIO;
- ``sources/``: bitext files, TFDS datasets (WMT19), gettext catalogs;
- ``vocab``: shared SentencePiece model with ``<2xx>`` language pieces (``mnmt-vocab``);
- ``tasks``: SeqIO task registration; ``mixtures``: weights, temperature/oversampling, grids;
  ``gin_mixtures`` / ``gin_register``: mixtures declared in gin files;
- ``pipeline`` (+ ``packing``, ``stream_workers``): resumable training iterator and eval batches.
"""
