"""Launch scripts for a study on Cloud TPU VMs or on a SLURM GPU cluster.

Both targets run the same self-contained command on every host of a run:

    mnmt-study run-one STUDY --run RUN_ID --out OUT

which prepares the study's data (idempotently), registers the run's mixture and trains that one
run; `mnmt.training.trainer` calls `jax.distributed.initialize()` on multi-host slices, where JAX discovers
the coordinator from the TPU metadata or from SLURM's environment. OUT must be visible to every
host (a shared file system, or a bucket mounted on each host).

Both survive preemption: the SLURM job requeues a run stopped by SIGTERM after its checkpoint;
the Cloud TPU script retries each run, re-creating a preempted VM first (`cloud_tpu_script`).

We write scripts rather than calling `gcloud` / `sbatch` ourselves so that the exact commands can
be read, versioned and re-run; `mnmt-study launch ... --script FILE` writes one.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Sequence

from mnmt.study.spec import RunSpec


def run_one_command(study_args: Sequence[str], run: RunSpec, out: str, python: str = "mnmt-study") -> str:
    """The shell command that trains `run` of the study named by `study_args`."""
    argv = [python, "run-one", *study_args, "--run", run.run_id, "--out", out]
    return shlex.join(argv)


def prepare_command(study_args: Sequence[str], out: str, python: str = "mnmt-study") -> str:
    """The shell command that prepares the study's data once, before any run starts."""
    return shlex.join([python, "prepare", *study_args, "--out", out])


# Exit statuses of `mnmt-study run-one` that a retry cannot fix: a usage or study error (2) fails
# the same way again, and a diverged run (3) diverges again from its last checkpoint.
NOT_RETRIED = (2, 3)

TPU_FUNCTIONS = r"""tpu() {  # gcloud compute tpus tpu-vm VERB TPU FLAGS... [ARGS...]
  local verb="$1"; shift
  gcloud compute tpus tpu-vm "$verb" "$TPU" "${GCLOUD_FLAGS[@]}" "$@"
}

create_tpu() {
  if [ -z "$ACCELERATOR_TYPE" ] || [ -z "$RUNTIME_VERSION" ]; then
    echo "mnmt launch: cannot create TPU $TPU: this script was written without" \
         "--accelerator-type and --runtime-version; create it by hand (retrying meanwhile)" >&2
    return 1
  fi
  tpu create --accelerator-type="$ACCELERATOR_TYPE" --version="$RUNTIME_VERSION" \
    ${CREATE_FLAGS[@]+"${CREATE_FLAGS[@]}"}  # (an empty array trips set -u before bash 4.4)
}

ensure_tpu() {  # make the TPU VM usable again; 0 when it is READY and set up
  local state
  state="$(tpu describe --format='value(state)')" || state=MISSING
  case "$state" in
    READY) ;;
    PREEMPTED|TERMINATED)  # a Spot VM taken back cannot be started again, only re-created
      echo "mnmt launch: TPU $TPU is $state: deleting and creating it again" >&2
      tpu delete --quiet || true  # already gone is fine; create says if it is not
      create_tpu || return 1
      NEEDS_SETUP=1 ;;
    STOPPED)
      echo "mnmt launch: TPU $TPU is STOPPED: starting it" >&2
      tpu start || return 1
      NEEDS_SETUP=1 ;;
    MISSING|"")
      echo "mnmt launch: TPU $TPU does not exist: creating it" >&2
      create_tpu || return 1
      NEEDS_SETUP=1 ;;
    *)
      echo "mnmt launch: TPU $TPU is $state: waiting" >&2
      return 1 ;;
  esac
  if [ "$NEEDS_SETUP" = 1 ]; then
    tpu ssh --worker=all --command="$SETUP" || return 1
    NEEDS_SETUP=0
  fi
}

with_retries() {  # KEY WORKER COMMAND: run COMMAND on WORKER until it succeeds, then mark KEY done
  local key="$1" worker="$2" command="$3" attempt status=1
  if [ -e "$STATE_DIR/$key.done" ]; then
    echo "== $key: finished before ($STATE_DIR/$key.done), skipped"
    return 0
  fi
  for ((attempt = 1; attempt <= MAX_ATTEMPTS; attempt++)); do
    echo "== $key (attempt $attempt of $MAX_ATTEMPTS)"
    if ((attempt > 1)); then
      sleep "$RETRY_WAIT"
      ensure_tpu || { status=$?; continue; }
    fi
    tpu ssh --worker="$worker" --command="$command"
    status=$?
    if [ "$status" -eq 0 ]; then
      mkdir -p "$STATE_DIR" && touch "$STATE_DIR/$key.done"
      return 0
    fi
    case " $NOT_RETRIED " in
      *" $status "*)
        echo "mnmt launch: $key failed with exit status $status (2: usage or study error," \
             "3: diverged), which a retry cannot fix" >&2
        exit "$status" ;;
    esac
    echo "mnmt launch: $key: attempt $attempt exited $status (preempted, host lost or" \
         "stopped by SIGTERM after a checkpoint)" >&2
  done
  echo "mnmt launch: $key failed $MAX_ATTEMPTS times (last exit status $status); giving up;" \
       "re-run this script to go on from its checkpoint" >&2
  exit 1
}
"""


def cloud_tpu_script(
    study_args: Sequence[str],
    runs: Sequence[RunSpec],
    out: str,
    *,
    tpu_name: str,
    zone: str,
    project: str | None = None,
    workdir: str = "~/mnmt-scaling",
    accelerator_type: str | None = None,
    runtime_version: str | None = None,
    spot: bool = False,
    setup: str | None = None,
    max_attempts: int = 20,
    retry_wait: int = 60,
) -> str:
    """A bash script that trains the runs one after another on a (multi-host) Cloud TPU VM slice,
    surviving preemptions.

    Every worker of the slice runs the same command (`--worker=all`), as multi-host JAX requires.
    Each step (the data preparation, then each run) is tried up to `max_attempts` times,
    `retry_wait` seconds apart; before a retry the script reads the VM's state and, if a
    preemption took it, deletes and re-creates it (`accelerator_type`, `runtime_version`,
    `spot`) and runs `setup` on every worker. A run resumes from its own checkpoint in `out`;
    a step that succeeded is recorded in a state folder next to the script and skipped when the
    script is run again. The script's comments say why delete + create (no queued resources).
    """
    if max_attempts < 1 or retry_wait < 0:
        raise ValueError(f"expected max_attempts >= 1 and retry_wait >= 0, got {max_attempts}, "
                         f"{retry_wait}")
    flags = [f"--zone={zone}"] + ([f"--project={project}"] if project else [])
    create_flags = ["--spot"] if spot else []
    state = state_key(study_args, runs, out, tpu_name, zone, project)
    if setup is None:  # no way to install here: say so on every worker instead of failing later
        setup = (f"test -x {workdir}/.venv/bin/mnmt-study || {{ echo \"no mnmt-scaling install "
                 f"in {workdir} on $(hostname): give mnmt-study launch --setup\" >&2; exit 1; }}")
    lines = [
        "#!/usr/bin/env bash",
        f"# {len(runs)} runs on Cloud TPU {tpu_name} ({zone}); generated by mnmt-study launch.",
        "# Set up once: create the TPU VM, clone mnmt-scaling into the workdir on every worker and",
        "# install it with: pip install -c requirements/constraints.txt -e '.[tpu]' (or give",
        "# --setup: the script then runs it on every worker of a VM it creates or starts itself).",
        "#",
        f"# Preemption: the data preparation and each run are tried up to {max_attempts} times,",
        f"# {retry_wait} s apart. Before a retry the script reads the VM's state (describe):",
        "#   READY                -> retry as it is (a host was lost, or SIGTERM stopped the run",
        "#                           after a checkpoint: run-one exits 143);",
        "#   PREEMPTED/TERMINATED -> delete the VM and create it again (same accelerator type,",
        "#                           runtime version, Spot or not), then run the setup;",
        "#   STOPPED              -> start it (its disk is kept), then run the setup;",
        "#   missing              -> create it, then run the setup;",
        "#   anything else        -> (CREATING, REPAIRING, ...) wait for the next attempt.",
        "# Why delete + create and not queued resources: a preempted Spot VM cannot be started",
        "# again, only re-created, and a preempted queued resource must be deleted and queued",
        "# again too; re-creating keeps this script to the tpu-vm commands it already uses, and a",
        "# create refused for lack of capacity is just a failed attempt, retried after the wait.",
        "# Every run resumes from its own checkpoint in OUT (which must outlive the VM: a bucket",
        "# or a shared file system mounted by the setup); run-one skips a finished run (exit 0).",
        "# A step that succeeded is recorded in STATE_DIR and skipped when this script is re-run.",
        "# Exit status: 0 every run finished; 1 a step failed MAX_ATTEMPTS times; 2 or 3 a step",
        "# failed in a way a retry cannot fix (usage or study error, diverged), at once.",
        "set -uo pipefail  # no -e: with_retries handles a failed attempt",
        f"TPU={shlex.quote(tpu_name)}",
        f"GCLOUD_FLAGS=({shlex.join(flags)})",
        f"ACCELERATOR_TYPE={shlex.quote(accelerator_type or '')}",
        f"RUNTIME_VERSION={shlex.quote(runtime_version or '')}",
        f"CREATE_FLAGS=({shlex.join(create_flags)})",
        f"SETUP={shlex.quote(setup)}",
        f"MAX_ATTEMPTS={int(max_attempts)}",
        f"RETRY_WAIT={int(retry_wait)}",
        f"NOT_RETRIED={shlex.quote(' '.join(map(str, NOT_RETRIED)))}",
        "NEEDS_SETUP=0",
        f'STATE_DIR="${{MNMT_LAUNCH_STATE:-$(dirname "$0")/.mnmt-launch-{state}}}"',
        TPU_FUNCTIONS.rstrip("\n"),
        # Data preparation writes the shared vocabulary: once, from worker 0, before any run.
        shlex.join(["with_retries", "prepare", "0",
                    f"cd {workdir} && .venv/bin/{prepare_command(study_args, out)}"]),
    ]
    for run in runs:
        remote = f"cd {workdir} && .venv/bin/{run_one_command(study_args, run, out)}"
        lines.append(shlex.join(["with_retries", run.run_id, "all", remote]))
    lines.append(f"echo {shlex.quote(f'mnmt launch: all {len(runs)} runs finished')}")
    return "\n".join(lines) + "\n"


def state_key(study_args: Sequence[str], runs: Sequence[RunSpec], out: str, tpu_name: str,
              zone: str, project: str | None) -> str:
    """A short hash naming the state folder of one launch, so that a script written for another
    study, output directory or TPU never takes this one's finished runs for its own."""
    text = json.dumps([list(study_args), [r.run_id for r in runs], out, tpu_name, zone, project])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def slurm_script(
    study_args: Sequence[str],
    runs: Sequence[RunSpec],
    out: str,
    *,
    nodes: int = 1,
    gpus_per_node: int = 8,
    partition: str | None = None,
    time_limit: str = "24:00:00",
    workdir: str = "$HOME/mnmt-scaling",
) -> str:
    """An sbatch job array with one task per run; each task spans `nodes` nodes, one process per GPU."""
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError(f"expected nodes >= 1 and gpus_per_node >= 1, got {nodes}, {gpus_per_node}")
    ids = " ".join(shlex.quote(r.run_id) for r in runs)
    command = run_one_command(study_args, RunSpec("${RUN_ID}", "", {}, 0), out)
    command = command.replace(shlex.quote("${RUN_ID}"), '"${RUN_ID}"')
    job = [
        "#!/usr/bin/env bash",
        "#SBATCH --job-name=mnmt-study",
        f"#SBATCH --array=0-{len(runs) - 1}",
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks-per-node={gpus_per_node}",
        f"#SBATCH --gpus-per-node={gpus_per_node}",
        f"#SBATCH --time={time_limit}",
        # 5 minutes before the time limit every task gets SIGTERM: the run checkpoints, exits 143
        # and is requeued below, resuming from that checkpoint (runs longer than one limit).
        "#SBATCH --signal=TERM@300",
        "#SBATCH --requeue",
        "#SBATCH --output=mnmt-study-%A_%a.log",
    ]
    if partition:
        job.append(f"#SBATCH --partition={partition}")
    job += [
        "set -euo pipefail",
        f"RUNS=({ids})",
        'RUN_ID="${RUNS[$SLURM_ARRAY_TASK_ID]}"',
        f"cd {workdir}",
        # One process per GPU; jax.distributed.initialize() reads SLURM's environment.
        f"status=0; srun .venv/bin/{command} || status=$?",
        'if [ "$status" -eq 143 ]; then  # stopped by the time limit or preemption, checkpointed',
        '  scontrol requeue "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"',
        "  exit 0",
        "fi",
        'exit "$status"',
    ]
    lines = [
        "#!/usr/bin/env bash",
        f"# {len(runs)} runs as a SLURM job array; generated by mnmt-study launch. Run this on the",
        "# login node of a cluster where mnmt-scaling is installed in the workdir with:",
        "#   pip install -c requirements/constraints.txt -e '.[gpu]'",
        "set -euo pipefail",
        f"cd {workdir}",
        "# Data preparation writes the shared vocabulary: once, here, before any run starts.",
        f".venv/bin/{prepare_command(study_args, out)}",
        "sbatch <<'MNMT_JOB'",
        *job,
        "MNMT_JOB",
    ]
    return "\n".join(lines) + "\n"
