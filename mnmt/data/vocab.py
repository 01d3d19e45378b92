"""Shared SentencePiece vocabulary (``mnmt-vocab``) with target-language tokens as single pieces.

One model is trained on a balanced sample of every pair (both sides), as in Fernandes et al.
2023 §3.1 (a shared vocabulary, the target-language token ``<2xx>`` prepended to the source).
Ids follow T5/SeqIO: pad 0, EOS 1, UNK 2, no BOS.

The language tokens are registered as the user-defined symbols ``▁<2xx>`` (with the word
boundary marker), not ``<2xx>``: SentencePiece prepends ``▁`` to the text, so a bare ``<2xx>``
symbol comes out as two pieces ``▁`` + ``<2xx>`` — one wasted token per example. With
``▁<2xx>`` the text ``"<2de> the cat"`` encodes to ``[▁<2de>, ▁the, ▁cat]``.

Decoder-only models (Caillaut et al. 2024 §3.3) also need the separator ``</src>`` between source
and target-language token. It is opt-in (``train_vocabulary(..., separator=True)``,
``mnmt-vocab --separator``), registered as ``▁</src>`` after the language tokens, so that
vocabularies trained for encoder-decoder studies keep their ids; :func:`separator_id` finds it
and names the vocabulary when it is missing.

Caillaut's domain tags ``<dom_news>`` (§3.3) are opt-in too (``train_vocabulary(...,
domains=["news"])``), registered as ``▁<dom_news>`` after the separator; :func:`domain_token_id`
names the token and the vocabulary file when a vocabulary lacks one.

Text becomes ids by one rule, :func:`text_encoder` (examples: :func:`example_encoder`), on every
path: the token cache's build, the in-memory and synthetic training streams, the evaluation
tasks and ``mnmt-translate``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from fitting.data.io import is_remote
from mnmt.data.text_encoding import text_encoder

__all__ = ["train_vocabulary", "get_vocabulary", "lang_token", "lang_piece", "separator_id",
           "has_separator", "SEPARATOR", "SEPARATOR_PIECE", "domain_token", "domain_piece",
           "domain_token_id", "text_encoder", "example_encoder", "main"]

_CODE_RE = re.compile(r"^[a-z][a-z0-9_]{0,15}$")

# The decoder-only source/target separator (Caillaut et al. 2024 §3.3) and its piece.
SEPARATOR = "</src>"
SEPARATOR_PIECE = "\u2581" + SEPARATOR


def lang_token(code: str) -> str:
    """The text form of a target-language token, e.g. ``<2de>``."""
    if not isinstance(code, str) or not _CODE_RE.match(code):
        raise ValueError(
            f"invalid language code {code!r}: expected lowercase letters/digits, e.g. 'de'"
        )
    return f"<2{code}>"


def lang_piece(code: str) -> str:
    """The SentencePiece piece of a language token (``▁<2de>``)."""
    return "\u2581" + lang_token(code)


def domain_token(name: str) -> str:
    """The text form of a domain tag (Caillaut et al. 2024 §3.3), e.g. ``<dom_news>``."""
    if not isinstance(name, str) or not _CODE_RE.match(name):
        raise ValueError(f"invalid domain name {name!r}: expected lowercase letters, digits or "
                         "'_' (at most 16, starting with a letter), e.g. 'news'")
    return f"<dom_{name}>"


def domain_piece(name: str) -> str:
    """The SentencePiece piece of a domain tag (``▁<dom_news>``)."""
    return "\u2581" + domain_token(name)


def domain_token_id(vocab: Any, name: str, path: str = "") -> int:
    """Id of ``▁<dom_name>``; a one-line ValueError naming the token and the vocabulary file
    when the vocabulary has no such single piece."""
    sp = vocab.tokenizer if hasattr(vocab, "tokenizer") else vocab
    pid = sp.piece_to_id(domain_piece(name))
    if pid == sp.unk_id() or sp.id_to_piece(pid) != domain_piece(name):
        where = path or getattr(vocab, "sentencepiece_model_file", "") or "the vocabulary"
        raise ValueError(
            f"vocabulary {where} has no piece for the domain tag {domain_token(name)!r}: train "
            f"one with it (train_vocabulary(..., domains=[{name!r}]); mnmt-train adds the "
            "InputConfig.domains tags when it trains the vocabulary) and point the run at it")
    return int(pid)


def _balanced_texts(
    texts: Mapping[str, Sequence[Any]] | Sequence[str], n_per_source: int | None, seed: int
) -> list[str]:
    """Flatten texts; a mapping (e.g. pair → [(src, tgt)] or [str]) is balanced per key."""
    if isinstance(texts, Mapping):
        if not texts:
            raise ValueError("train_vocabulary: got an empty mapping of texts")
        sizes = {k: len(v) for k, v in texts.items()}
        empty = [k for k, n in sizes.items() if n == 0]
        if empty:
            raise ValueError(f"train_vocabulary: no texts for {empty}")
        n = min(sizes.values()) if n_per_source is None else n_per_source
        rng = random.Random(seed)
        out: list[str] = []
        for key in sorted(texts):
            items = list(texts[key])
            if len(items) > n:
                items = rng.sample(items, n)
            for item in items:
                out.extend([item] if isinstance(item, str) else list(item))
        return out
    out = [t for t in texts]
    if not out:
        raise ValueError("train_vocabulary: got no texts")
    bad = [i for i, t in enumerate(out[:1000]) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"train_vocabulary: text #{bad[0]} is {type(out[bad[0]]).__name__}, expected str")
    return out


def train_vocabulary(
    family_or_texts: Any,
    out_dir: str,
    vocab_size: int,
    *,
    languages: Iterable[str] | None = None,
    n_per_pair: int = 20_000,
    name: str = "spm",
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    seed: int = 0,
    overwrite: bool = True,
    separator: bool = False,
    sample: Mapping[str, Any] | None = None,
    domains: Iterable[str] = (),
) -> str:
    """Train one shared SentencePiece model; returns the path of ``<out_dir>/<name>.model``.

    ``family_or_texts``: a :class:`~mnmt.data.synthetic.SyntheticFamily` (``n_per_pair``
    examples of every pair, both sides), a mapping key → texts or (src, tgt) tuples (balanced to
    the smallest key, or to ``n_per_pair`` if given explicitly), or a sequence of strings.
    ``languages``: codes whose ``<2xx>`` tokens are added (default: all of the family's).
    ``separator``: also add the decoder-only separator ``</src>`` (as the piece after the
    language tokens; without it the ids are those of a vocabulary trained before the option).
    ``sample``: how the texts were drawn (e.g. by :func:`mnmt.data.vocab_sample.sample_task_texts`),
    recorded in ``<name>.json``; it does not change the model.
    ``domains``: domain names whose tags ``<dom_name>`` are added (after the separator, so the
    other ids are those of a vocabulary trained without them; Caillaut et al. 2024 §3.3).
    """
    import sentencepiece as spm
    import tensorflow as tf

    if int(vocab_size) < 16:
        raise ValueError(f"vocab_size: expected at least 16, got {vocab_size}")
    if hasattr(family_or_texts, "texts") and hasattr(family_or_texts, "pairs"):
        texts = family_or_texts.texts(n_per_pair, seed=seed)
        codes = list(languages) if languages is not None else family_or_texts.language_codes()
    else:
        texts = _balanced_texts(family_or_texts, None, seed)
        codes = list(languages or [])
    symbols = [lang_piece(c) for c in sorted(set(codes))]
    if separator:
        symbols.append(SEPARATOR_PIECE)
    domain_names = sorted(set(domains))
    symbols.extend(domain_piece(d) for d in domain_names)
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise ValueError("train_vocabulary: all texts are empty")
    model = io.BytesIO()
    try:
        _train_spm(spm, texts, model, vocab_size, model_type, character_coverage, symbols)
    except RuntimeError as e:
        if "required_chars" in str(e):
            raise ValueError(
                f"vocab_size {vocab_size} is smaller than the number of distinct characters the "
                f"texts need ({e}); use a larger vocab_size (CJK-like scripts need one piece per "
                "character) or a smaller character_coverage"
            ) from e
        raise
    tf.io.gfile.makedirs(out_dir)
    path = os.path.join(out_dir, f"{name}.model")
    if tf.io.gfile.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists (pass overwrite=True to replace it)")
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    meta = {
        "vocab_size": sp.get_piece_size(),
        "requested_vocab_size": int(vocab_size),
        "languages": sorted(set(codes)),
        "language_pieces": {c: sp.piece_to_id(lang_piece(c)) for c in sorted(set(codes))},
        "num_texts": len(texts),
        "model_type": model_type,
        "source": getattr(family_or_texts, "preset", "texts"),
        "seed": seed,
    }
    if separator:
        meta["separator_piece"] = sp.piece_to_id(SEPARATOR_PIECE)
    if domain_names:
        meta["domain_pieces"] = {d: sp.piece_to_id(domain_piece(d)) for d in domain_names}
    if sample is not None:
        meta["sample"] = dict(sample)
    with tf.io.gfile.GFile(os.path.join(out_dir, f"{name}.json"), "w") as f:
        f.write(json.dumps(meta, indent=1, sort_keys=True))
    return path


def _train_spm(spm, texts, model, vocab_size, model_type, character_coverage, symbols) -> None:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=int(vocab_size),
        model_type=model_type,
        character_coverage=character_coverage,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        user_defined_symbols=symbols,
        hard_vocab_limit=False,
        shuffle_input_sentence=False,
        input_sentence_size=0,
        num_threads=1,
        minloglevel=2,
    )


def get_vocabulary(path: str):
    """``seqio.SentencePieceVocabulary`` for a model file (cached per path and file version:
    a model retrained at the same local path is reloaded)."""
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"SentencePiece model not found: {path}")
    version = None
    if not is_remote(path):
        st = os.stat(path)
        version = (st.st_mtime_ns, st.st_size)
    return _load_vocabulary(path, version)


_SEEN_VERSIONS: dict[str, Any] = {}


@lru_cache(maxsize=16)
def _load_vocabulary(path: str, version: Any):
    import seqio
    from seqio import vocabularies

    if _SEEN_VERSIONS.get(path, version) != version:
        # seqio memoises loaded models by path; drop that memo when the file changed
        cached = getattr(vocabularies, "_load_model_internal", None)
        if cached is not None and hasattr(cached, "cache_clear"):
            cached.cache_clear()
    _SEEN_VERSIONS[path] = version
    return seqio.SentencePieceVocabulary(path)


def example_encoder(vocab: Any, lang_id: int
                    ) -> Callable[[str, str], tuple[list[int], list[int]]]:
    """``encode(source, target)`` → ``([lang_id, *ids(source)], ids(target))``: a training or
    evaluation example before EOS, the target-language token as its id (Fernandes et al. 2023
    §3.1), each side by :func:`text_encoder`."""
    enc = text_encoder(vocab)
    lid = int(lang_id)

    def encode(source: str, target: str) -> tuple[list[int], list[int]]:
        return [lid, *enc(source)], enc(target)

    return encode


def language_token_id(vocab: Any, code: str) -> int:
    """Id of ``▁<2xx>`` in a vocabulary; error if the model has no such single piece."""
    sp = vocab.tokenizer if hasattr(vocab, "tokenizer") else vocab
    pid = sp.piece_to_id(lang_piece(code))
    if pid == sp.unk_id() or sp.id_to_piece(pid) != lang_piece(code):
        raise ValueError(
            f"vocabulary has no single piece for language token {lang_token(code)!r}: retrain it "
            f"with languages including {code!r} (mnmt-vocab --languages ...)"
        )
    return pid


def has_separator(vocab: Any) -> bool:
    """Whether a vocabulary has the decoder-only separator ``▁</src>`` as a single piece."""
    sp = vocab.tokenizer if hasattr(vocab, "tokenizer") else vocab
    pid = sp.piece_to_id(SEPARATOR_PIECE)
    return pid != sp.unk_id() and sp.id_to_piece(pid) == SEPARATOR_PIECE


def separator_id(vocab: Any, path: str = "") -> int:
    """Id of the separator ``▁</src>``; a one-line ValueError naming the vocabulary ``path``
    and what to do when the vocabulary was trained without it."""
    if not has_separator(vocab):
        where = path or getattr(vocab, "sentencepiece_model_file", "") or "the vocabulary"
        raise ValueError(
            f"vocabulary {where} has no separator piece {SEPARATOR!r}, which decoder-only models "
            "need: train a vocabulary with it (mnmt-vocab --separator, or "
            "train_vocabulary(..., separator=True); mnmt-study and mnmt-train add it when they "
            "train the vocabulary for a decoder-only size) and point the run at the new file")
    sp = vocab.tokenizer if hasattr(vocab, "tokenizer") else vocab
    return int(sp.piece_to_id(SEPARATOR_PIECE))


def main(argv: Sequence[str] | None = None) -> int:
    """Train the shared SentencePiece model of a synthetic preset or text files; the full
    ``mnmt-vocab`` (also registered tasks' training data) is :func:`mnmt.study.vocab_cli.main`."""
    ap = argparse.ArgumentParser(prog="mnmt-vocab", description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--preset", help="synthetic family preset (e.g. cpu-tiny)")
    src.add_argument("--text_files", nargs="+", help="plain-text or TSV files (one sample each, balanced)")
    ap.add_argument("--out_dir", required=True)
    ap.add_argument("--vocab_size", type=int, required=True)
    ap.add_argument("--languages", default=None, help="comma-separated codes for <2xx> tokens")
    ap.add_argument("--n_per_pair", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="spm")
    ap.add_argument("--model_type", default="unigram", choices=["unigram", "bpe"])
    ap.add_argument("--domains", default=None,
                    help="comma-separated domain names whose tags <dom_NAME> are added "
                         "(Caillaut's decoder-only domain tags, InputConfig.domains)")
    ap.add_argument("--separator", action="store_true",
                    help=f"add the decoder-only separator {SEPARATOR} (needed by decoder-only "
                         "sizes; other ids then differ from a vocabulary trained without it)")
    args = ap.parse_args(argv)
    from mnmt.tensorflow_setup import start_tensorflow

    start_tensorflow()
    langs = args.languages.split(",") if args.languages else None
    if args.preset:
        from mnmt.data.synthetic import get_family

        source: Any = get_family(args.preset, seed=args.seed)
    else:
        import tensorflow as tf

        source = {}
        for path in args.text_files:
            with tf.io.gfile.GFile(path, "r") as f:
                lines = [ln.rstrip("\n") for ln in f]
            source[path] = [part for ln in lines for part in ln.split("\t") if part.strip()]
    path = train_vocabulary(
        source, args.out_dir, args.vocab_size, languages=langs, n_per_pair=args.n_per_pair,
        name=args.name, model_type=args.model_type, seed=args.seed, separator=args.separator,
        domains=args.domains.split(",") if args.domains else (),
    )
    print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
