"""``mnmt-vocab``: the shared SentencePiece vocabulary from tasks' sources, a study, or a preset.

Trains on a seeded, pair-balanced, size-limited sample (:mod:`mnmt.data.vocab_sample`) of a
study's tasks (``--study``), of corpora named on the command line (``--bitext``, ``--tfds``,
``--gettext``, ``--synthetic``) or of tasks registered by a module (``--tasks`` with
``--task_module``); ``--preset`` and ``--text_files`` are :func:`mnmt.data.vocab.main`'s. The
sources are registered against a throw-away placeholder vocabulary that holds only the language
tokens. Lives in the study layer because ``--study`` registers a study's tasks as
``mnmt-study`` does.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections.abc import Sequence

from mnmt.data.vocab_sample import placeholder_vocabulary, sample_task_texts

__all__ = ["main"]

log = logging.getLogger(__name__)
_TASK_SOURCES = ("study", "tasks", "bitext", "tfds", "gettext", "synthetic")
_SAMPLE_ONLY = ("max_chars", "task_module", "gin", "tfds_data_dir", "locale_dir",
                "skip_malformed")


def _positive_int(text: str) -> int:
    try:
        value = float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value != int(value) or value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(value)


def _split_pair(flag: str, spec: str) -> tuple[str, str]:
    pair, sep, rest = spec.partition("=")
    src, dash, tgt = pair.partition("-")
    if not sep or not rest or not dash or not src or not tgt:
        raise ValueError(f"{flag} {spec!r}: expected PAIR=VALUE, e.g. en-de=train.tsv")
    return pair, rest


def _parser() -> argparse.ArgumentParser:
    from mnmt.data.vocab import SEPARATOR

    ap = argparse.ArgumentParser(
        prog="mnmt-vocab",
        description="Train the shared SentencePiece vocabulary (target-language tokens <2xx> as "
                    "single pieces) on a seeded, pair-balanced sample of the tasks' training data.")
    old = ap.add_argument_group("synthetic preset or hand-made text (as before)")
    old.add_argument("--preset", help="synthetic family preset (e.g. cpu-tiny)")
    old.add_argument("--text_files", nargs="+",
                     help="plain-text or TSV files (one sample each, balanced)")
    src = ap.add_argument_group(
        "task sources (combinable; each task's training split is streamed once)")
    src.add_argument("--study", help="a study gin file, shipped study name or preset: the tasks "
                     "of its pairs (StudySpec.task_module's, or its synthetic preset's); also the "
                     "defaults of --out_dir/--name (StudySpec.vocabulary_path), --vocab_size and "
                     "--separator (decoder-only sizes)")
    src.add_argument("--gin", action="append", default=[], metavar="StudySpec.FIELD=VALUE",
                     help="override a field of --study (repeatable)")
    src.add_argument("--bitext", action="append", default=[], metavar="PAIR=TSV|PAIR=SRC,TGT",
                     help="a TSV file or two aligned text files (gzip, gs:// allowed; repeatable)")
    src.add_argument("--skip_malformed", action="store_true",
                     help="skip (and count) malformed bitext lines instead of stopping")
    src.add_argument("--tfds", action="append", default=[], metavar="PAIR=DATASET",
                     help="a prepared TFDS translation dataset, e.g. en-de=wmt19_translate/de-en "
                          "(repeatable)")
    src.add_argument("--tfds_data_dir", default=None,
                     help="where the TFDS datasets are prepared (default: $TFDS_DATA_DIR)")
    src.add_argument("--gettext", action="append", default=[], metavar="PAIR",
                     help="gettext catalogs of a pair, e.g. en-de (repeatable)")
    src.add_argument("--locale_dir", default=None, help="gettext catalogs' directory "
                     "(default: /usr/share/locale)")
    src.add_argument("--synthetic", action="append", default=[], metavar="PRESET",
                     help="every pair of a synthetic preset (repeatable)")
    src.add_argument("--tasks", nargs="+", default=[], metavar="NAME",
                     help="tasks registered through mnmt.data.tasks (e.g. by --task_module)")
    src.add_argument("--task_module", action="append", default=[], metavar="MODULE",
                     help="a module to import first, which registers tasks (repeatable)")
    ap.add_argument("--out_dir", default=None, help="where NAME.model and NAME.json go "
                    "(required unless --study names StudySpec.vocabulary_path)")
    ap.add_argument("--vocab_size", type=int, default=None)
    ap.add_argument("--languages", default=None, help="comma-separated codes for <2xx> tokens "
                    "(default with task sources: the languages of the pairs)")
    ap.add_argument("--n_per_pair", type=_positive_int, default=20_000,
                    help="examples per task (per pair of a --preset); default 20000")
    ap.add_argument("--max_chars", type=_positive_int, default=None,
                    help="size limit: characters of the whole sample (both sides; an equal share "
                         "per task), e.g. 2e9")
    ap.add_argument("--split", default="train", help="the split sampled (default: train)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default=None, help="file name stem (default: spm)")
    ap.add_argument("--model_type", default="unigram", choices=["unigram", "bpe"])
    ap.add_argument("--separator", action="store_true",
                    help=f"add the decoder-only separator {SEPARATOR} (needed by decoder-only "
                         "sizes; other ids then differ from a vocabulary trained without it)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """``mnmt-vocab``: train the shared SentencePiece model on a sample of task sources (or of a
    synthetic preset or text files, :func:`mnmt.data.vocab.main`)."""
    from mnmt.data import vocab

    argv = list(sys.argv[1:] if argv is None else argv)
    ap = _parser()
    args = ap.parse_args(argv)
    used = [k for k in _TASK_SOURCES if getattr(args, k)]
    if args.preset or args.text_files:
        if args.preset and args.text_files or used:
            ap.error("give --preset, --text_files or task sources ("
                     + ", ".join(f"--{k}" for k in _TASK_SOURCES) + "), not several")
        extra = [k for k in (*_SAMPLE_ONLY, "split") if getattr(args, k) not in
                 (None, [], False, "train")]
        if extra:
            ap.error(f"--{extra[0]} applies to task sources only")
        return vocab.main(argv)
    if not used:
        ap.error("expected a source: --study, --bitext, --tfds, --gettext, --synthetic, --tasks, "
                 "--preset or --text_files")
    if args.gin and not args.study:
        ap.error("--gin overrides fields of --study; give --study")
    logging.basicConfig(level=logging.INFO, format="mnmt-vocab: %(message)s")
    errors: tuple[type[BaseException], ...] = (ValueError, KeyError, FileNotFoundError,
                                               ImportError)
    if args.study:
        from mnmt.study.stages import UsageError

        errors += (UsageError,)
    try:
        return _train_from_tasks(args)
    except errors as err:  # one line for what the user can fix; tracebacks for the rest
        lines = str(err).strip().strip("'\"").splitlines()
        print(f"mnmt-vocab: error: {lines[0] if lines else type(err).__name__}", file=sys.stderr)
        return 2


def _study_spec(args):
    """As `mnmt-study`: a gin file, a shipped study file's name, or a preset."""
    from mnmt.study.stages import UsageError, load_spec

    try:
        return load_spec(args.study, None, args.gin)
    except UsageError as err:
        if not str(err).startswith("study file not found") or args.study.endswith(".gin"):
            raise
    return load_spec(None, args.study, args.gin)


def _train_from_tasks(args) -> int:
    import importlib

    from mnmt.data import tasks, vocab
    from mnmt.tensorflow_setup import start_tensorflow

    start_tensorflow()
    spec = _study_spec(args) if args.study else None
    for module in args.task_module:
        importlib.import_module(module)
    pairs: list[str] = []  # of the sources registered here, for the placeholder's tokens
    direct: list[tuple[str, str, str]] = []  # (kind, pair, value)
    for kind, flag in (("bitext", "--bitext"), ("tfds", "--tfds")):
        for spec_text in getattr(args, kind):
            pair, value = _split_pair(flag, spec_text)
            direct.append((kind, pair, value))
    for pair in args.gettext:
        src, _, tgt = pair.partition("-")
        if not src or not tgt:
            raise ValueError(f"--gettext {pair!r}: expected a pair such as en-de")
        direct.append(("gettext", pair, ""))
    pairs += [pair for _, pair, _ in direct]
    families = []
    if args.synthetic or (spec is not None and not spec.tasks):
        from mnmt.data.synthetic import get_family

        for preset in args.synthetic + ([spec.data_preset] if spec and not spec.tasks else []):
            families.append(get_family(preset))
            pairs += families[-1].pairs
    if spec is not None:
        pairs += list(spec.pairs)
    requested = args.languages.split(",") if args.languages else []
    for code in requested:
        vocab.lang_token(code)
    names: list[str] = list(args.tasks)
    with tempfile.TemporaryDirectory(prefix="mnmt-vocab-") as tmp:
        codes = {c for p in pairs for c in p.split("-")} | set(requested)
        placeholder = placeholder_vocabulary(codes, tmp) if pairs else ""
        names += _register_sources(args, spec, direct, placeholder)
        samples = sample_task_texts(names, args.n_per_pair, seed=args.seed,
                                    max_chars=args.max_chars, split=args.split,
                                    stats=(stats := {}))
    task_pairs = {name: tasks.get_task_info(name).pair for name in samples}
    langs = requested or sorted({c for p in task_pairs.values() for c in p.split("-")})
    out_dir, name, vocab_size, separator = args.out_dir, args.name, args.vocab_size, args.separator
    if spec is not None:
        if spec.vocabulary_path and out_dir is None:
            if not spec.vocabulary_path.endswith(".model"):
                raise ValueError(f"StudySpec.vocabulary_path {spec.vocabulary_path!r}: expected a "
                                 "path ending in .model (or pass --out_dir and --name)")
            out_dir = os.path.dirname(spec.vocabulary_path) or "."
            name = name or os.path.basename(spec.vocabulary_path)[: -len(".model")]
        vocab_size = vocab_size or spec.vocab_size
        if not separator:
            from mnmt.study.stages import needs_separator

            separator = needs_separator(spec)
    if out_dir is None or vocab_size is None:
        missing = "--out_dir" if out_dir is None else "--vocab_size"
        raise ValueError(f"{missing} is required (or a --study that sets it)")
    n = len(next(iter(samples.values())))
    log.info("vocabulary sample: %s tasks × %s examples (%s characters): %s", len(samples),
             f"{n:,}", f"{sum(s['chars'] for s in stats.values()):,}", ", ".join(
                 f"{t} ({task_pairs[t]}, {stats[t]['read']:,} read)" for t in samples))
    path = vocab.train_vocabulary(
        samples, out_dir, vocab_size, languages=langs, name=name or "spm",
        model_type=args.model_type, seed=args.seed, separator=separator,
        sample={"tasks": {t: {"pair": task_pairs[t], **stats[t]} for t in samples},
                "split": args.split, "n_per_task": args.n_per_pair, "max_chars": args.max_chars},
    )
    print(path)
    return 0


def _register_sources(args, spec, direct, placeholder: str) -> list[str]:
    """Register the command line's sources against the placeholder vocabulary → task names."""
    from mnmt.data import tasks

    names: list[str] = []
    taken: set[str] = set()

    def fresh(base: str) -> str:
        name, i = base, 1
        while name in taken:
            i += 1
            name = f"{base}_{i}"
        taken.add(name)
        return name

    for kind, pair, value in direct:
        name = fresh(f"vocab_{kind}_{pair.replace('-', '_')}")
        if kind == "bitext":
            from mnmt.data.sources.bitext import register_bitext_task

            files = value.split(",")
            if len(files) > 2 or not all(files):
                raise ValueError(f"--bitext {pair}={value}: expected one TSV file or two aligned "
                                 "files SRC,TGT")
            names.append(register_bitext_task(
                name, pair, placeholder, {args.split: files[0] if len(files) == 1 else tuple(files)},
                skip_malformed=args.skip_malformed, validate=False))
        elif kind == "tfds":
            from mnmt.data.sources.tfds import register_tfds_task

            names.append(register_tfds_task(name, value, pair, placeholder,
                                            data_dir=args.tfds_data_dir,
                                            splits={args.split: args.split}))
        else:
            from mnmt.data.sources.gettext import DEFAULT_LOCALE_DIR, register_gettext_task

            names.append(register_gettext_task(name, pair, placeholder,
                                               locale_dir=args.locale_dir or DEFAULT_LOCALE_DIR))
    for preset in args.synthetic:
        names += tasks.register_synthetic_tasks(preset, placeholder, prefix="vocab").values()
    if spec is not None:
        names += _register_study(spec, placeholder)
    return names


def _register_study(spec, placeholder: str) -> list[str]:
    """The task names of a study's pairs, registered as `mnmt-study` would (real data: its
    task module's `register_study_tasks`; synthetic: its preset with `data_caps`)."""
    import importlib

    from mnmt.data import tasks
    from mnmt.study.stages import study_task_arguments

    if not spec.tasks:
        names = tasks.register_synthetic_tasks(spec.data_preset, placeholder,
                                               caps=dict(spec.data_caps), prefix="vocab")
        missing = sorted(set(spec.pairs) - set(names))
        if missing:
            raise ValueError(f"StudySpec.pairs: {missing} not in data preset "
                             f"{spec.data_preset!r} (has {sorted(names)})")
        return [names[pair] for pair in spec.pairs]
    if spec.task_module:
        module = importlib.import_module(spec.task_module)
        register = getattr(module, "register_study_tasks", None)
        if callable(register):
            register(placeholder, **study_task_arguments(spec, register))
    return [task for _, task in spec.tasks]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
