"""`mnmt-study launch`: write a Cloud TPU or SLURM script that trains every run of a study.

The subcommand is a plugin of `mnmt-study` (entry-point group `mnmt_study.commands` in setup.py),
so that `launch` depends on `mnmt` and never the other way round.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from launch import remote
from mnmt.study.cli import add_study_arguments
from mnmt.study.spec import expand
from mnmt.study.stages import UsageError, atomic_write, load_spec


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `launch` subcommand to `mnmt-study`'s parser."""
    p = add_study_arguments(
        subparsers.add_parser("launch", help="write a Cloud TPU or SLURM script for a study"),
        out_required=True)
    p.add_argument("--target", choices=("tpu", "slurm"), required=True)
    p.add_argument("--script", required=True, help="where to write the launch script")
    p.add_argument("--tpu-name")
    p.add_argument("--zone")
    p.add_argument("--project")
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
        text = remote.cloud_tpu_script(study_args, runs, args.out, tpu_name=args.tpu_name,
                                       zone=args.zone, project=args.project)
    else:
        text = remote.slurm_script(study_args, runs, args.out, nodes=args.nodes,
                                   gpus_per_node=args.gpus_per_node, partition=args.partition,
                                   time_limit=args.time)
    script = Path(args.script)
    try:
        atomic_write(script, text)
    except OSError as err:
        raise UsageError(f"cannot write launch script {script}: {err.strerror or err}") from err
    script.chmod(0o755)
    print(f"wrote {script}: {len(runs)} runs on {args.target}; run it with: bash {script}")
    return 0
