"""Text → ids: the one tokenization rule of every path (:func:`text_encoder`).

A module of its own, importing nothing of ``mnmt``, so that the synthetic family (whose exact
irreducible loss counts target tokens) and :mod:`mnmt.data.vocab` (which re-exports it) share
it without an import circle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["text_encoder"]


def text_encoder(vocab: Any) -> Callable[[str], list[int]]:
    """The one rule that turns text into ids: ``encode(text)`` is SentencePiece's segmentation
    of the whole text, ``sentencepiece.SentencePieceProcessor.encode(text)`` with no sampling,
    BOS, EOS or reversal, whatever options the processor was made with.

    ``vocab``: a ``seqio.SentencePieceVocabulary`` or a SentencePiece processor. Every path
    calls it (the token cache's build, the in-memory and synthetic training streams, the
    evaluation tasks, ``mnmt-translate``), so the same text gives the same ids everywhere.

    Always the whole text, once: a unigram model breaks exact ties between segmentations of
    the same pieces in another order (``▁w|4|44`` and ``▁w|44|4``) by the float32 rounding of
    the Viterbi path's running score, which depends on the text before the word. So encoding
    word by word (a per-word cache) or ``"<2xx> " + text`` can segment a word otherwise
    (decoding to the same text), and so can tensorflow_text's SentencePiece op (seqio's
    ``encode_tf``); the language token is prepended as an id instead
    (:func:`mnmt.data.vocab.example_encoder`).
    """
    sp = vocab.tokenizer if hasattr(vocab, "tokenizer") else vocab
    encode = sp.Encode

    def enc(text: str) -> list[int]:
        return encode(text, out_type=int, add_bos=False, add_eos=False, reverse=False,
                      enable_sampling=False)

    return enc
