"""`mnmt-train`: train one model from gin files, with T5X's flags and macro names.

    mnmt-train --gin_file=t5x_configs/runs/cpu_tiny.gin \\
        --gin.MODEL_DIR="'/tmp/mnmt/run1'" --gin.TRAIN_STEPS=400

`--gin_file` may be repeated (searched in `--gin_search_paths`, then the working directory, then
the installed `t5x_configs/`); `--gin.NAME=VALUE` binds a gin parameter or macro (values in gin
syntax: strings quoted). Before training, the tasks and mixture the config names are made
available by `setup_tasks` (importing `MIXTURE_OR_TASK_MODULE`s and/or registering the synthetic
family). Multi-host jobs pass `--coordinator_address --num_processes --process_id` (or run under
SLURM / on a multi-host TPU slice, where JAX finds them itself). `--profile_steps A:B` traces
steps A to B with `jax.profiler` into MODEL_DIR/events (`TrackingConfig.profile_steps`).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import gin

from fitting.data import io

# The repository's (or installed) t5x_configs/: mnmt/training/train.py -> ../../t5x_configs.
_CONFIG_ROOT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "t5x_configs")

EXIT_PREEMPTED = 143  # 128 + SIGTERM, what a scheduler expects from a preempted job
EXIT_DIVERGED = 3


@gin.configurable
def setup_tasks(
    modules: Sequence[str] = (),
    synthetic_preset: str | None = None,
    vocabulary_path: str | None = None,
    vocab_size: int = 512,
    mixture_name: str | None = None,
    mixture_weights: dict[str, float] | None = None,
    seed: int = 0,
    separator: bool = False,
    domains: Sequence[str] = (),
) -> dict[str, str]:
    """Make the run's SeqIO tasks/mixture exist; returns pair → task name (may be empty).

    - `modules`: Python modules whose import registers tasks (T5X's `MIXTURE_OR_TASK_MODULE`).
    - `synthetic_preset`: register the synthetic family's tasks with the vocabulary at
      `vocabulary_path` (trained there first, on the family, if the file does not exist), and,
      with `mixture_name`/`mixture_weights` (pair → weight), a weighted mixture of them.
    - `separator`: a vocabulary trained here gets the decoder-only separator `</src>`
      (`mnmt-train` sets it for a decoder-only MODEL_SIZE).
    - `domains`: a vocabulary trained here gets these domain tags `<dom_NAME>` (Caillaut et al.
      2024 §3.3; `mnmt-train` passes InputConfig.domains' names for a decoder-only MODEL_SIZE).
    """
    for module in modules:
        importlib.import_module(module)
    if not synthetic_preset:
        return {}
    from mnmt.data import mixtures, synthetic, tasks, vocab  # noqa: PLC0415

    if vocabulary_path is None:
        raise ValueError("setup_tasks.synthetic_preset needs setup_tasks.vocabulary_path")
    if not os.path.exists(vocabulary_path):
        family = synthetic.get_family(synthetic_preset, seed=seed)
        out_dir = os.path.dirname(os.path.abspath(vocabulary_path))
        made = vocab.train_vocabulary(family, out_dir, vocab_size, separator=separator,
                                      domains=domains)
        if os.path.abspath(made) != os.path.abspath(vocabulary_path):
            os.replace(made, vocabulary_path)
    pair_tasks = tasks.register_synthetic_tasks(synthetic_preset, vocabulary_path, seed=seed)
    if mixture_name and mixture_weights:
        unknown = sorted(set(mixture_weights) - set(pair_tasks))
        if unknown:
            raise ValueError(f"setup_tasks.mixture_weights names pairs {unknown} that preset "
                             f"{synthetic_preset!r} does not have (it has {sorted(pair_tasks)})")
        mixtures.register_weighted_mixture(
            mixture_name, {pair_tasks[p]: w for p, w in mixture_weights.items() if w > 0})
    return pair_tasks


def vocabulary_symbols(config: Any) -> dict[str, Any]:
    """`setup_tasks` arguments of a decoder-only run: the separator, and the domain tags its
    `InputConfig.domains` names (only when set, so a gin-bound `setup_tasks.domains` stays)."""
    from mnmt.data.decoder_format import DecoderOptions, domain_names  # noqa: PLC0415

    names = domain_names(DecoderOptions.of(config.inputs))
    return {"separator": True, **({"domains": names} if names else {})}


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="mnmt-train", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gin_file", action="append", default=[],
                        help="gin file (repeatable), T5X layout, e.g. t5x_configs/runs/cpu_tiny.gin")
    parser.add_argument("--gin_search_paths", default="",
                        help="comma-separated directories searched for gin files and includes")
    parser.add_argument("--coordinator_address", default=None)
    parser.add_argument("--num_processes", type=int, default=None)
    parser.add_argument("--process_id", type=int, default=None)
    parser.add_argument("--quiet", action="store_true", help="no per-step progress lines")
    parser.add_argument("--profile_steps", type=_profile_steps, default=None, metavar="A:B",
                        help="trace steps A to B with jax.profiler into MODEL_DIR/events "
                             "(TensorBoard's profile tab); sets TrackingConfig.profile_steps")
    args, rest = parser.parse_known_args(argv)
    bindings, unknown = [], []
    for item in rest:
        if item.startswith("--gin.") and "=" in item:
            name, value = item[len("--gin."):].split("=", 1)
            bindings.append(f"{name} = {value}")
        else:
            unknown.append(item)
    if unknown:
        parser.error(f"unrecognised arguments: {' '.join(unknown)} "
                     "(gin bindings are written --gin.NAME=VALUE)")
    if not args.gin_file:
        parser.error("at least one --gin_file is required, e.g. "
                     "--gin_file=t5x_configs/runs/cpu_tiny.gin")
    return args, bindings


def _profile_steps(text: str) -> tuple[int, int]:
    """`--profile_steps A:B` (argparse type): the error names the flag and the expected form."""
    from mnmt.training.tracking import parse_profile_steps  # noqa: PLC0415

    try:
        return parse_profile_steps(text, flag="--profile_steps")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--profile_steps: ")) from None


def parse_gin(gin_files: Sequence[str], bindings: Sequence[str], search_paths: str = "") -> None:
    """Parse gin files and bindings; files are looked up like T5X's `--gin_search_paths`."""
    paths = [p for p in search_paths.split(",") if p] + [os.getcwd(), _CONFIG_ROOT,
                                                          os.path.dirname(_CONFIG_ROOT)]
    for p in paths:
        gin.add_config_file_search_path(p)
    import mnmt.training.config  # noqa: F401, PLC0415  (registers the configurables)
    from mnmt.gin_files import parse_files_and_bindings  # noqa: PLC0415

    parse_files_and_bindings(gin_files, bindings)


@gin.configurable
def run(config=gin.REQUIRED, quiet: bool = False):
    """Train `config` (a `TrainConfig` built from gin) with the default progress printer."""
    from mnmt.training import trainer  # noqa: PLC0415
    from mnmt.training.progress import print_progress  # noqa: PLC0415

    def progress(event):
        if not quiet or event.kind != "train":
            print_progress(event)

    return trainer.train(config, progress=progress)


def _with_profile_steps(config, steps: tuple[int, int]):
    """`config` tracing `steps` (`--profile_steps`); ValueError naming the flag past its end."""
    if steps[1] > config.train_steps:
        raise ValueError(f"--profile_steps {steps[0]}:{steps[1]}: step {steps[1]} is past the "
                         f"run's last step (TRAIN_STEPS = {config.train_steps})")
    return config.updated(tracking={"profile_steps": steps})


def _log_to_model_dir(model_dir: str) -> None:
    """Progress lines of `mnmt.training.train` also go to MODEL_DIR/train.log (local directories)."""
    if io.is_remote(model_dir):
        return
    os.makedirs(model_dir, exist_ok=True)
    handler = logging.FileHandler(os.path.join(model_dir, "train.log"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger = logging.getLogger("mnmt.training.train")
    logger.setLevel(logging.INFO)
    logger.propagate = False  # stderr already gets the line from the progress printer
    logger.addHandler(handler)


def error_text(err: BaseException) -> str:
    """The message of `err` without the line gin appends to errors raised inside a configurable
    ("In call to configurable 'run' (...)"), so a one-line error stays one line."""
    lines = [line for line in str(err).splitlines()
             if not line.strip().startswith("In call to configurable")]
    return "\n".join(lines).rstrip()


def main(argv: Sequence[str] | None = None) -> int:
    # Libraries (Orbax, absl) log at WARNING; progress lines go to stderr and MODEL_DIR/train.log.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    args, bindings = parse_args(argv)
    from mnmt.training import distributed  # noqa: PLC0415

    distributed.initialize(args.coordinator_address, args.num_processes, args.process_id)
    from mnmt.tensorflow_setup import start_tensorflow  # noqa: PLC0415

    start_tensorflow()  # before the tasks are registered: SeqIO's backend, CPU-only and quiet
    try:
        parse_gin(args.gin_file, bindings, args.gin_search_paths)
        from mnmt.training.config import TrainConfig  # noqa: PLC0415

        config = TrainConfig()
        from mnmt.models import zoo  # noqa: PLC0415

        # a vocabulary trained for a decoder-only size gets the separator </src> and the domain
        # tags of InputConfig.domains (otherwise setup_tasks keeps its gin-bound or defaults)
        pair_tasks = setup_tasks(**vocabulary_symbols(config)) \
            if zoo.is_decoder_only(config.model_size) else setup_tasks()
        if not config.eval.tasks and pair_tasks:  # EVAL_TASKS = None: every registered pair
            config = config.updated(eval={"tasks": dict(pair_tasks)})
        if args.profile_steps is not None:
            config = _with_profile_steps(config, args.profile_steps)
        _log_to_model_dir(config.model_dir)
        summary = run(config=config, quiet=args.quiet)
    except (ValueError, KeyError, FileNotFoundError, SyntaxError, io.NoSpaceError) as e:
        # NoSpaceError: a full disk, one line naming the file; the run's files are intact and
        # the same command resumes once space is freed.
        print(f"mnmt-train: error: {error_text(e)}", file=sys.stderr)
        return 2
    print(f"mnmt-train: {summary.run_id} {summary.status} at step {summary.final_step} "
          f"({summary.wall_s:.1f} s) {summary.message}".rstrip(), file=sys.stderr)
    for pair, loss in sorted(summary.final_eval.items()):
        print(f"  {pair}: loss {loss:.4f}", file=sys.stderr)
    for branch in summary.branches:  # cool-down branches (BranchConfig.points)
        losses = ", ".join(f"{pair} loss {loss:.4f}" for pair, loss in
                           sorted(branch.final_eval.items()))
        print(f"  branch {branch.run_id} {branch.status} at step {branch.final_step}"
              f"{': ' + losses if losses else ''}", file=sys.stderr)
    statuses = {summary.status, *(branch.status for branch in summary.branches)}
    if "diverged" in statuses:
        return EXIT_DIVERGED
    if "preempted" in statuses:
        return EXIT_PREEMPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
