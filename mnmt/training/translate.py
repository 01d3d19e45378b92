"""`mnmt-translate`: translate text with a trained run's checkpoint, and score it with sacrebleu.

    mnmt-translate runs/mini-3_p0.50_s0 --input test.en --pair en-de --output test.hyp.de
    mnmt-translate runs/mini-3_p0.50_s0 --input test.en --reference test.de --json --output hyp
    echo "the cat sees a dog" | mnmt-translate runs/mini-3_p0.50_s0 --input - --pair en-de

The run is read from `RUN_DIR/run.json` (docs/reference/metrics_schema.md): its zoo size and
activation dtype, its vocabulary, its feature lengths and the pairs it evaluates
(`mixture.tasks`). The parameters are those of the newest checkpoint that restores, or of
`--checkpoint STEP`. Each input line is decoded as the trainer's own decode does
(`mnmt.training.evaluation.decode_and_score`): tokenised with the run's SentencePiece vocabulary
behind the pair's target-language token `<2xx>` (Fernandes et al. 2023 §3.1, as
`mnmt.data.tasks` prepends it), trimmed and ended with EOS by the pipeline's example format
(`mnmt.data.formats`), and beam-searched (beam 4 and length penalty α by default, Fernandes §3.1)
in fixed-shape batches under jit — one compilation, the last batch padded. Decoder-only runs
continue the prompt `source </src> <2xx>` (Caillaut et al. 2024 §3.3) cut from those rows by
`evaluation.decoder_prompts`, with the run's Caillaut options (`<eos>` prefix, source-language
and domain tags, `mnmt.data.decoder_format.DecoderOptions`) read from the checkpoint's input
state, where the trainer records them. With `--reference`, corpus BLEU and ChrF come from
`evaluation.corpus_scores` (sacrebleu, with the trainer's tokenizer rule for the target language).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from fitting.data import io
from fitting.data.schema import RUN_JSON
from mnmt.training import evaluation, run_files
from mnmt.training.config import DecodeConfig

__all__ = ["TranslateError", "TrainedRun", "read_run", "load_run",
           "decoder_options_of", "choose_pair", "Translator", "read_lines", "main"]

CHECKPOINTS = "checkpoints"  # MODEL_DIR/checkpoints/step_N (mnmt.training.checkpoints)
DEFAULT_BATCH_SIZE = 64  # sentences per decoded batch (EvalConfig.batch_size's default)
_SHAPE_FIELDS = ("num_encoder_layers", "num_decoder_layers", "emb_dim", "num_heads", "head_dim",
                 "mlp_dim", "vocab_size", "architecture")


class TranslateError(ValueError):
    """An unusable run directory, checkpoint, pair or text file (a one-line message naming it)."""


@dataclasses.dataclass
class TrainedRun:
    """A run's model with the parameters of one checkpoint, ready to decode."""

    run_dir: str
    run: dict[str, Any]            # run.json
    step: int                      # the checkpoint step restored
    steps: list[int]               # every checkpoint step of the run
    params: Any
    model: Any                     # EncoderDecoderModel or DecoderOnlyModel
    model_config: Any
    vocabulary: Any                # seqio.SentencePieceVocabulary
    vocabulary_path: str
    feature_lengths: dict[str, int]
    pairs: list[str]               # the pairs the run evaluates (mixture.tasks)
    decoder_options: Any = None    # DecoderOptions of a decoder-only run (None: the defaults)

    @property
    def architecture(self) -> str:
        return str(self.model_config.architecture)


# ---------------------------------------------------------------------------- the run directory
def read_run(run_dir: str) -> dict[str, Any]:
    """run.json of `run_dir`, with the fields translation needs; TranslateError names what is
    missing (the directory, the file or a field)."""
    if not io.exists(run_dir):
        raise TranslateError(f"run directory {run_dir} does not exist")
    if not io.isdir(run_dir):
        raise TranslateError(f"{run_dir} is not a directory: expected a run directory "
                             f"({RUN_JSON}, {CHECKPOINTS}/) written by mnmt-train or mnmt-study")
    if not io.listdir(run_dir):
        raise TranslateError(f"run directory {run_dir} is empty: expected {RUN_JSON} and "
                             f"{CHECKPOINTS}/ (written by mnmt-train or mnmt-study)")
    run = run_files.read_run_json(run_dir)  # RunFileError (a ValueError) for invalid JSON
    path = run_files.join(run_dir, RUN_JSON)
    if run is None:
        raise TranslateError(f"{run_dir} has no {RUN_JSON}: not a run directory of mnmt-train "
                             "or mnmt-study")
    for keys in (("model", "size"), ("vocabulary", "path"), ("training", "feature_lengths"),
                 ("mixture", "tasks")):
        value: Any = run
        for k in keys:
            value = value.get(k) if isinstance(value, dict) else None
        if not value:
            raise TranslateError(f"{path}: field {'.'.join(keys)} is missing or empty")
    lengths = run["training"]["feature_lengths"]
    if not isinstance(lengths, dict) or set(lengths) != {"inputs", "targets"}:
        raise TranslateError(f"{path}: training.feature_lengths must be "
                             f"{{'inputs': int, 'targets': int}}, got {lengths!r}")
    return run


def _restore_params(run_dir: str, step: int | None
                    ) -> tuple[Any, int, list[int], dict[str, Any]]:
    """(params, step restored, all steps, meta): `step`, or the newest checkpoint that
    restores; TranslateError when the run has no checkpoint or not `step`."""
    from mnmt.training.checkpoints import Checkpointer, CheckpointRestoreError  # noqa: PLC0415

    directory = run_files.join(run_dir, CHECKPOINTS)
    if not io.isdir(directory):
        raise TranslateError(f"{run_dir} has no {CHECKPOINTS}/ directory: the run saved no "
                             "checkpoint")
    checkpointer = Checkpointer(directory, read_only=True)
    try:
        steps = checkpointer.all_steps()
        if not steps:
            raise TranslateError(f"{directory} holds no complete checkpoint")
        if step is not None and step not in steps:
            raise TranslateError(f"{run_dir} has no checkpoint at step {step}: available steps "
                                 f"{', '.join(map(str, steps))}")
        state, meta = checkpointer.restore_raw(step)
    except CheckpointRestoreError as err:  # no step given: none of them restores
        raise TranslateError(str(err)) from err
    except TranslateError:
        raise
    except Exception as err:  # noqa: BLE001 (a damaged checkpoint shows as many error types)
        raise TranslateError(f"checkpoint step {step} ({checkpointer.step_path(step)}) cannot be "
                             f"restored: {type(err).__name__}: {err}") from err
    finally:
        checkpointer.close()
    restored = int(meta.get("step", step if step is not None else steps[-1]))
    if not isinstance(state, dict) or "params" not in state:
        raise TranslateError(f"checkpoint step {restored} of {run_dir} holds no parameters "
                             "('params')")
    return state["params"], restored, steps, meta


def decoder_options_of(meta: dict[str, Any]) -> Any:
    """The decoder-only format options a checkpoint's input state records (the trainer records
    them only when one is set; `DecoderOptions()` otherwise)."""
    from mnmt.data.decoder_format import DecoderOptions  # noqa: PLC0415

    states = (meta.get("inputs") or {}).values()
    recorded = next((s["decoder_format"] for s in states
                     if isinstance(s, dict) and s.get("decoder_format")), None)
    if not recorded:
        return DecoderOptions()
    fields = dict(recorded)
    fields["domains"] = tuple(tuple(kv) for kv in fields.get("domains", ()))
    return DecoderOptions(**fields)


def _load_vocabulary(run: dict[str, Any], run_dir: str, override: str | None) -> tuple[Any, str]:
    from mnmt.data import vocab  # noqa: PLC0415  (tensorflow, seqio)

    recorded = run["vocabulary"]
    path = override or str(recorded["path"])
    origin = "--vocabulary" if override else f"{run_files.join(run_dir, RUN_JSON)} vocabulary.path"
    if not io.exists(path):
        raise TranslateError(f"vocabulary {path} ({origin}) not found: give the run's "
                             "SentencePiece model with --vocabulary")
    digest = recorded.get("sha256")
    if digest and run_files.file_sha256(path) != digest:
        raise TranslateError(f"vocabulary {path} ({origin}) is not the file the run was trained "
                             f"with (sha256 differs from run.json's {digest[:12]}…)")
    try:
        vocabulary = vocab.get_vocabulary(path)
        size = int(vocabulary.vocab_size)
    except Exception as err:  # noqa: BLE001 (sentencepiece raises RuntimeError, OSError, …)
        raise TranslateError(f"cannot read the SentencePiece vocabulary {path} ({origin}): "
                             f"{err}") from err
    model_vocab = run["model"].get("vocab_size")
    if model_vocab is not None and int(model_vocab) != size:
        raise TranslateError(f"vocabulary {path} has {size} pieces but the run's model has "
                             f"{model_vocab} (run.json model.vocab_size)")
    return vocabulary, path


def _model_config(run: dict[str, Any], run_dir: str, vocab_size: int) -> Any:
    """The zoo size's config as the trainer built it (`run_setup.model_config_for`), checked
    against the shape run.json recorded."""
    from mnmt.models import zoo  # noqa: PLC0415

    training = run.get("training", {})
    config = zoo.get_config(str(run["model"]["size"]), vocab_size,
                            dropout_rate=float(training.get("dropout_rate", 0.0)),
                            dtype=str(training.get("activation_dtype", "float32")),
                            remat_policy=str(training.get("remat_policy", "none")))
    recorded = run["model"].get("config") or {}
    for field in _SHAPE_FIELDS:
        if field in recorded and recorded[field] != getattr(config, field, None):
            raise TranslateError(
                f"{run_files.join(run_dir, RUN_JSON)}: model.config.{field} = {recorded[field]!r} "
                f"but the zoo's size {run['model']['size']!r} now has "
                f"{getattr(config, field, None)!r}")
    return config


def load_run(run_dir: str, *, checkpoint: int | None = None,
             vocabulary_path: str | None = None) -> TrainedRun:
    """The run of `run_dir` with the parameters of checkpoint `checkpoint` (default: newest)."""
    from mnmt.tensorflow_setup import start_tensorflow  # noqa: PLC0415
    from mnmt.training.run_setup import make_model  # noqa: PLC0415

    run = read_run(run_dir)
    start_tensorflow()  # the vocabulary's backend: no accelerator, quiet start-up
    vocabulary, path = _load_vocabulary(run, run_dir, vocabulary_path)
    model_config = _model_config(run, run_dir, int(vocabulary.vocab_size))
    params, step, steps, meta = _restore_params(run_dir, checkpoint)
    lengths = {k: int(v) for k, v in run["training"]["feature_lengths"].items()}
    return TrainedRun(run_dir=run_dir, run=run, step=step, steps=steps, params=params,
                      model=make_model(model_config), model_config=model_config,
                      vocabulary=vocabulary, vocabulary_path=path, feature_lengths=lengths,
                      pairs=sorted(run["mixture"]["tasks"]),
                      decoder_options=decoder_options_of(meta))


def choose_pair(pairs: Sequence[str], requested: str | None, run_dir: str = "") -> str:
    """`requested`, one of the run's `pairs` (closest-name suggestion when it is not); without
    it the run's only pair."""
    where = f"run {run_dir}" if run_dir else "the run"
    if requested is None:
        if len(pairs) == 1:
            return pairs[0]
        raise TranslateError(f"{where} has {len(pairs)} pairs ({', '.join(pairs)}): choose one "
                             "with --pair")
    if requested in pairs:
        return requested
    close = difflib.get_close_matches(requested, pairs, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise TranslateError(f"--pair {requested!r} is not a pair of {where}{hint}: expected one of "
                         f"{', '.join(pairs)}")


# ---------------------------------------------------------------------------- decoding
class Translator:
    """Beam search of one pair with a run's parameters, in batches of one fixed shape."""

    def __init__(self, run: TrainedRun, pair: str, *, beam_size: int, alpha: float,
                 batch_size: int = DEFAULT_BATCH_SIZE, max_length: int | None = None):
        from mnmt.data import vocab  # noqa: PLC0415
        from mnmt.data.decoder_format import NO_TAGS, DecoderOptions  # noqa: PLC0415
        from mnmt.data.formats import example_format  # noqa: PLC0415

        if beam_size < 1 or batch_size < 1 or (max_length is not None and max_length < 1):
            raise TranslateError(f"--beam-size, --batch-size and --max-length must be ≥ 1, got "
                                 f"{beam_size}, {batch_size}, {max_length}")
        self.run, self.pair = run, pair
        self.beam_size, self.alpha, self.batch_size = int(beam_size), float(alpha), int(batch_size)
        self.max_length = int(max_length or run.feature_lengths["targets"])
        self.eos = int(getattr(run.vocabulary, "eos_id", 1))
        self.lang_id = vocab.language_token_id(run.vocabulary,
                                               evaluation.target_language(pair))
        separator, options, self.tags = None, None, NO_TAGS
        if run.model_config.is_decoder_only:
            separator = vocab.separator_id(run.vocabulary, run.vocabulary_path)
            options = (run.decoder_options or DecoderOptions()).for_eval()  # as eval rows
            self.tags = self._tags(options)
        self.format = example_format(run.architecture, run.feature_lengths, separator, options)
        # Source pieces the task pipeline keeps: `inputs` tokens hold <2xx> + source + EOS
        # (encoder-decoder) or the prompt [<eos>] source </src> <2xx> [tags] (decoder-only).
        self.source_length = int(getattr(self.format, "source_length",
                                         run.feature_lengths["inputs"] - 2))
        self.truncated = 0

    def _tags(self, options: Any) -> Any:
        """(source-language tag, domain tag) ids of the pair, as `decoder_format.task_tags`
        gives them for the pair's task (the task need not be registered here)."""
        from mnmt.data import vocab  # noqa: PLC0415

        src = None
        if options.source_language_tags:
            src = vocab.language_token_id(self.run.vocabulary, self.pair.split("-")[0])
        task = str(self.run.run["mixture"]["tasks"].get(self.pair, ""))
        domain = options.domain_of(task, self.pair)
        dom = (None if domain is None
               else vocab.domain_token_id(self.run.vocabulary, domain, self.run.vocabulary_path))
        return (src, dom)

    def encode(self, lines: Sequence[str]) -> list[Any]:
        """The examples of `lines` in the pipeline's format (an empty target); counts the lines
        cut to the inputs feature length in `self.truncated`."""
        from mnmt.data.vocab import example_encoder  # noqa: PLC0415

        encode = example_encoder(self.run.vocabulary, self.lang_id)  # the trainer's rule
        finish = self.format.finisher(self.tags)
        examples = []
        for line in lines:
            inputs, _ = encode(line, "")
            self.truncated += len(inputs) - 1 > self.source_length
            examples.append(finish(inputs, []))
        return examples

    def batches(self, examples: Sequence[Any]) -> Iterator[tuple[dict[str, np.ndarray], int]]:
        """(batch, real rows) of `examples`, every batch of the same shape (the last padded with
        all-zero rows, as the trainer's eval batches are)."""
        size = min(self.batch_size, max(len(examples), 1))
        for start in range(0, len(examples), size):
            chunk = list(examples[start:start + size])
            batch = self.format.pad(chunk)
            pad = size - len(chunk)
            if pad:
                batch = {k: np.concatenate([v, np.zeros((pad, *v.shape[1:]), v.dtype)])
                         for k, v in batch.items()}
            yield batch, len(chunk)

    def predict(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """Tokens [rows, max_length] of one batch: the same `predict_batch` call as the
        trainer's decode (mnmt.training.trainer), jit-compiled once per shape by the model."""
        model = self.run.model
        if self.run.model_config.is_decoder_only:
            width = int(self.run.feature_lengths["inputs"])
            prompts = evaluation.decoder_prompts(batch, width, eos_id=self.eos)
            return np.asarray(model.predict_batch(
                self.run.params, prompts, beam_size=self.beam_size, alpha=self.alpha,
                max_decode_length=self.max_length, eos_id=self.eos))
        return np.asarray(model.predict_batch(
            self.run.params, batch, beam_size=self.beam_size, alpha=self.alpha,
            max_decode_length=self.max_length, eos_id=self.eos))

    def translate(self, lines: Sequence[str],
                  progress: Callable[[int], None] | None = None) -> list[str]:
        """Hypotheses of `lines`, in order; `progress(done)` after each batch."""
        out: list[str] = []
        for batch, real in self.batches(self.encode(lines)):
            tokens = self.predict(batch)
            out.extend(evaluation.detokenize(tokens[i], self.run.vocabulary)
                       for i in range(real))
            if progress is not None:
                progress(len(out))
        return out


# ---------------------------------------------------------------------------- text files
def read_lines(path: str, what: str = "input") -> list[str]:
    """The lines of a UTF-8 text file (`-`: standard input), without their line ends;
    TranslateError naming the file (and line) when it cannot be read."""
    name = "standard input" if path == "-" else path
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with io.open_file(path, "rb") as f:
                data = f.read()
    except (FileNotFoundError, IsADirectoryError, PermissionError) as err:
        raise TranslateError(f"cannot read the {what} file {name}: {err.strerror or err}") from err
    lines = []
    for number, raw in enumerate(data.splitlines(), start=1):
        try:
            lines.append(raw.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as err:
            raise TranslateError(f"{what} file {name}, line {number}: not UTF-8 text "
                                 f"({err.reason} at byte {err.start})") from err
    return lines


def _write_hypotheses(path: str | None, hypotheses: Sequence[str]) -> None:
    text = "".join(h + "\n" for h in hypotheses)
    if path is None or path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        io.write_text_atomic(path, text)


# ---------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    defaults = DecodeConfig()
    p = argparse.ArgumentParser(prog="mnmt-translate", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (run.json, checkpoints/)")
    p.add_argument("--checkpoint", type=int, metavar="STEP",
                   help="the checkpoint step to restore (default: the newest)")
    p.add_argument("--input", required=True, metavar="FILE",
                   help="source sentences, one per line (UTF-8); '-' reads standard input")
    p.add_argument("--reference", metavar="FILE",
                   help="references, one per input line: print corpus BLEU and ChrF (sacrebleu)")
    p.add_argument("--output", metavar="FILE",
                   help="where the hypotheses go, one per line, written atomically "
                        "(default: standard output)")
    p.add_argument("--pair", metavar="SRC-TGT",
                   help="the pair to translate (required when the run has several)")
    p.add_argument("--beam-size", type=int, default=defaults.beam_size, metavar="N",
                   help=f"beam size (default {defaults.beam_size}, DecodeConfig's; 1 with "
                        "--alpha 0: greedy)")
    p.add_argument("--alpha", type=float, default=defaults.alpha, metavar="A",
                   help=f"length penalty α of the beam search (default {defaults.alpha})")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="B",
                   help=f"sentences per decoded batch (default {DEFAULT_BATCH_SIZE})")
    p.add_argument("--max-length", type=int, metavar="L",
                   help="longest hypothesis in pieces (default: the run's targets feature length)")
    p.add_argument("--vocabulary", metavar="FILE",
                   help="the run's SentencePiece model when it has moved from run.json's "
                        "vocabulary.path (checked against its sha256)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object with the scores and counts on standard output "
                        "(needs --output for the hypotheses)")
    p.add_argument("--quiet", action="store_true", help="no progress or summary on stderr")
    return p


def _note(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(f"mnmt-translate: {text}", file=sys.stderr, flush=True)


def run_command(args: argparse.Namespace) -> dict[str, Any]:
    """Translate (and score) as `args` say; returns the summary `--json` prints."""
    if args.json and args.output in (None, "-"):
        raise TranslateError("--json prints its object on standard output: give --output FILE "
                             "for the hypotheses")
    lines = read_lines(args.input)
    name = "standard input" if args.input == "-" else args.input
    if not lines:
        raise TranslateError(f"input file {name} is empty: nothing to translate")
    references = read_lines(args.reference, "reference") if args.reference else None
    if references is not None and len(references) != len(lines):
        raise TranslateError(f"reference file {args.reference} has {len(references)} lines but "
                             f"input file {name} has {len(lines)}: expected one reference per "
                             "input line")
    run = load_run(args.run_dir, checkpoint=args.checkpoint, vocabulary_path=args.vocabulary)
    pair = choose_pair(run.pairs, args.pair, args.run_dir)
    translator = Translator(run, pair, beam_size=args.beam_size, alpha=args.alpha,
                            batch_size=args.batch_size, max_length=args.max_length)
    _note(args, f"{run.run.get('run_id', args.run_dir)} checkpoint step {run.step}, {pair}, "
                f"{len(lines):,} sentences")
    report = evaluation.DecodeProgress((lambda line: _note(args, line)), len(lines),
                                       label="translated")
    start = time.perf_counter()
    hypotheses = translator.translate(lines, report.update)
    seconds = time.perf_counter() - start
    report.finish()
    if translator.truncated:
        _note(args, f"warning: {translator.truncated} of {len(lines)} input lines are longer "
                    f"than the run's inputs feature length ({run.feature_lengths['inputs']} "
                    f"tokens: {translator.source_length} source pieces) and were truncated")
    _write_hypotheses(args.output, hypotheses)
    summary: dict[str, Any] = {
        "run_dir": args.run_dir, "run_id": run.run.get("run_id"), "checkpoint_step": run.step,
        "pair": pair, "architecture": run.architecture, "sentences": len(lines),
        "truncated": translator.truncated, "beam_size": translator.beam_size,
        "alpha": translator.alpha, "max_length": translator.max_length,
        "batch_size": translator.batch_size, "seconds": round(seconds, 3),
        "sentences_per_s": round(len(lines) / max(seconds, 1e-9), 2),
        "output": args.output, "bleu": None, "chrf": None, "bleu_tokenize": None}
    if references is not None:
        bleu, chrf = evaluation.corpus_scores(hypotheses, references, pair)
        summary.update(bleu=bleu, chrf=chrf, bleu_tokenize=evaluation.bleu_tokenizer(pair),
                       references=args.reference)
    return summary


def _print_summary(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    if summary["bleu"] is not None:
        line = (f"BLEU = {summary['bleu']:.2f} (tokenize {summary['bleu_tokenize']})  "
                f"ChrF = {summary['chrf']:.2f}  ({summary['sentences']:,} sentences, "
                f"{summary['pair']}, checkpoint step {summary['checkpoint_step']})")
        # beside the hypotheses' file on stdout; on stderr when stdout holds the hypotheses
        print(line, file=sys.stdout if args.output not in (None, "-") else sys.stderr)
    _note(args, f"{summary['sentences']:,} sentences in {summary['seconds']:.1f} s "
                f"({summary['sentences_per_s']:.1f} sentences/s)"
                + (f" -> {args.output}" if args.output not in (None, "-") else ""))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        summary = run_command(args)
    except (TranslateError, ValueError, FileNotFoundError, io.NoSpaceError) as err:
        print(f"mnmt-translate: error: {err}", file=sys.stderr)
        return 2
    _print_summary(args, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
