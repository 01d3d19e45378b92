"""`mnmt-study launch`: write a Cloud TPU or SLURM script that trains every run of a study.

The subcommand is a plugin of `mnmt-study` (entry-point group `mnmt_study.commands` in setup.py),
so that `launch` depends on `mnmt` and never the other way round.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from fitting.data import io
from launch import remote
from mnmt.study.cli import add_study_arguments
from mnmt.study.spec import expand
from mnmt.study.stages import UsageError, load_spec


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `launch` subcommand to `mnmt-study`'s parser."""
    p = add_study_arguments(
        subparsers.add_parser("launch", help="write a Cloud TPU or SLURM script for a study"),
        out_required=True)
    p.add_argument("--target", choices=("tpu", "slurm"), required=True)
    p.add_argument("--script", required=True, help="where to write the launch script")
    p.add_argument("--tpu-name", help="TPU VM (slice) to run on")
    p.add_argument("--zone", help="its zone, e.g. us-central2-b")
    p.add_argument("--project", help="its Google Cloud project (default: gcloud's)")
    p.add_argument("--accelerator-type",
                   help="TPU accelerator type, e.g. v4-32: lets the script create the VM again "
                        "after a preemption (with --runtime-version)")
    p.add_argument("--runtime-version", help="TPU software version of a created VM, e.g. "
                                             "tpu-ubuntu2204-base")
    p.add_argument("--spot", action="store_true",
                   help="create the VM as a Spot VM (preemptible; the script re-creates it)")
    p.add_argument("--setup", metavar="COMMAND",
                   help="shell command run on every worker of a VM the script creates or starts "
                        "(install mnmt-scaling into ~/mnmt-scaling, mount OUT); default: check "
                        "that it is installed")
    p.add_argument("--max-attempts", type=_int_at_least(1), default=20,
                   help="tries of each run on TPU before the script gives up (default "
                        "%(default)s); each retry resumes from the run's checkpoint")
    p.add_argument("--retry-wait", type=_int_at_least(0), default=60, metavar="SECONDS",
                   help="wait before each retry on TPU (default %(default)s)")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--partition")
    p.add_argument("--time", default="24:00:00",
                   help="SLURM time limit of each array task (default %(default)s); a run "
                        "that reaches it checkpoints and is requeued")
    p.set_defaults(func=cmd_launch)


def cmd_launch(args: argparse.Namespace) -> int:
    """Write a Cloud TPU or SLURM script that trains every run of the study."""
    spec = load_spec(args.study, args.preset, args.gin)
    runs = expand(spec)
    study_args = [args.study] if args.study else ["--preset", args.preset or "default"]
    study_args += [f"--gin.{binding}" for binding in args.gin]
    if args.target == "tpu":
        if not args.tpu_name or not args.zone:
            raise UsageError("--target tpu needs --tpu-name and --zone")
        if bool(args.accelerator_type) != bool(args.runtime_version):
            raise UsageError("--accelerator-type and --runtime-version go together: the script "
                             "needs both to create the TPU VM again")
        if args.spot and not args.accelerator_type:
            raise UsageError("--spot needs --accelerator-type and --runtime-version: a preempted "
                             "Spot VM can only be created again")
        text = remote.cloud_tpu_script(
            study_args, runs, args.out, tpu_name=args.tpu_name, zone=args.zone,
            project=args.project, accelerator_type=args.accelerator_type,
            runtime_version=args.runtime_version, spot=args.spot, setup=args.setup,
            max_attempts=args.max_attempts, retry_wait=args.retry_wait)
    else:
        text = remote.slurm_script(study_args, runs, args.out, nodes=args.nodes,
                                   gpus_per_node=args.gpus_per_node, partition=args.partition,
                                   time_limit=args.time)
    script = Path(args.script)
    try:
        io.write_text_atomic(script, text)
    except OSError as err:
        raise UsageError(f"cannot write launch script {script}: {err.strerror or err}") from err
    script.chmod(0o755)
    print(f"wrote {script}: {len(runs)} runs on {args.target}; run it with: bash {script}")
    return 0


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """argparse type: an integer >= `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    return parse
