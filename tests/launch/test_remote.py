"""Launch scripts for Cloud TPU and SLURM: one command per run, data prepared once, valid bash."""

import shlex
import subprocess

import pytest

from launch import remote
from mnmt.study.loading import preset
from mnmt.study.spec import expand

RUNS = expand(preset("default"))


def bash_syntax_ok(text: str, tmp_path) -> bool:
    path = tmp_path / "script.sh"
    path.write_text(text)
    return subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


def test_tpu_script_prepares_once_then_runs_every_run_on_all_workers(tmp_path):
    text = remote.cloud_tpu_script(["--preset", "default"], RUNS, "/mnt/out dir",
                                   tpu_name="v4-32", zone="us-central2-b", project="p")
    assert bash_syntax_ok(text, tmp_path)
    assert "GCLOUD_FLAGS=(--zone=us-central2-b --project=p)" in text
    steps = [shlex.split(line) for line in text.splitlines() if line.startswith("with_retries ")]
    assert len(steps) == len(RUNS) + 1
    assert steps[0][1:3] == ["prepare", "0"] and "mnmt-study prepare" in steps[0][3]
    for run, argv in zip(RUNS, steps[1:], strict=True):
        assert argv[1:3] == [run.run_id, "all"]  # key of the finished marker, every worker
        remote_argv = shlex.split(argv[3].split(" && ", 1)[1])
        assert remote_argv[remote_argv.index("--run") + 1] == run.run_id
        assert remote_argv[remote_argv.index("--out") + 1] == "/mnt/out dir"
    # -e would end the study at the first preempted ssh; the retries handle failures instead
    assert "set -uo pipefail" in text and "set -e" not in text


def test_slurm_script_is_one_array_task_per_run(tmp_path):
    text = remote.slurm_script(["t5x_configs/studies/x.gin", "--gin.StudySpec.train_steps=5"], RUNS,
                               "/shared/out", nodes=2, gpus_per_node=4, partition="gpu")
    assert bash_syntax_ok(text, tmp_path)
    assert f"#SBATCH --array=0-{len(RUNS) - 1}" in text
    assert "#SBATCH --nodes=2" in text and "#SBATCH --gpus-per-node=4" in text
    runs_line = next(line for line in text.splitlines() if line.startswith("RUNS=("))
    assert shlex.split(runs_line[len("RUNS=("):-1]) == [r.run_id for r in RUNS]
    # data is prepared before sbatch, not inside each array task
    assert text.index("mnmt-study prepare") < text.index("sbatch")
    assert '--run "${RUN_ID}"' in text
    # before the time limit the run checkpoints (SIGTERM → exit 143) and the task is requeued
    assert "#SBATCH --signal=TERM@300" in text and "#SBATCH --requeue" in text
    assert text.index("|| status=$?") < text.index('"$status" -eq 143') < text.index("scontrol requeue")


def test_slurm_job_requeues_only_a_checkpointed_stop(tmp_path):
    """Run the array task's body with srun and scontrol stubbed: 143 requeues, other codes pass."""
    import subprocess

    text = remote.slurm_script(["--preset", "ci"], RUNS, "/o", time_limit="2-00:00:00")
    assert "#SBATCH --time=2-00:00:00" in text
    body = text.split("sbatch <<'MNMT_JOB'\n", 1)[1].split("MNMT_JOB", 1)[0]
    body = body.replace("cd $HOME/mnmt-scaling", "cd .")
    for code, requeued, status in ((143, True, 0), (0, False, 0), (3, False, 3)):
        stubs = (f"srun() {{ return {code}; }}\n"
                 f"scontrol() {{ echo \"requeue $*\" >> {tmp_path}/calls; }}\n"
                 "SLURM_ARRAY_TASK_ID=1; SLURM_ARRAY_JOB_ID=77\n")
        (tmp_path / "calls").write_text("")
        result = subprocess.run(["bash", "-c", stubs + body], capture_output=True, text=True)
        assert result.returncode == status, result.stderr
        calls = (tmp_path / "calls").read_text()
        assert (calls == "requeue requeue 77_1\n") if requeued else (calls == "")


def test_slurm_rejects_impossible_shapes():
    with pytest.raises(ValueError, match="gpus_per_node"):
        remote.slurm_script(["--preset", "ci"], RUNS, "/o", gpus_per_node=0)


# ---- the TPU script under a recording fake `gcloud` -------------------------------------------
FAKE_GCLOUD = """#!{python}
# Fake `gcloud compute tpus tpu-vm VERB TPU ...`: logs every call, keeps the VM's state in a
# file and answers ssh with the exit statuses planned per step (then 0). A planned "preempt"
# takes the VM (state PREEMPTED, ssh exits 255) until it is deleted and created again.
import json, os, shlex, sys

home = os.environ["FAKE_GCLOUD_HOME"]
args = sys.argv[1:]
with open(os.path.join(home, "calls.jsonl"), "a") as f:
    f.write(json.dumps(args) + "\\n")
plan_path = os.path.join(home, "plan.json")
plan = json.load(open(plan_path))
verb = args[3]
if verb == "describe":
    if plan["state"] == "MISSING":
        sys.exit("ERROR: NOT_FOUND")
    print(plan["state"])
elif verb == "delete":
    plan["state"] = "MISSING"
elif verb in ("create", "start"):
    plan["state"] = "READY"
elif verb == "ssh":
    if plan["state"] != "READY":
        sys.exit(255)
    command = next(a for a in args if a.startswith("--command="))[len("--command="):]
    argv = shlex.split(command)
    step = argv[argv.index("--run") + 1] if "--run" in argv else "prepare"
    planned = plan["ssh"].get(step, [])
    status = planned.pop(0) if planned else 0
    if status == "preempt":
        plan["state"], status = "PREEMPTED", 255
    if status == 0 and "--run" in argv:
        with open(os.path.join(home, "completed"), "a") as f:
            f.write(step + "\\n")
json.dump(plan, open(plan_path, "w"))
sys.exit(status if verb == "ssh" else 0)
"""

SETUP = "install-and-mount"


def run_tpu_script(tmp_path, ssh_plan, runs=RUNS[:3], state_dir=None, **options):
    """Write the TPU script for `runs` and run it with the fake gcloud first on PATH (and its
    finished-step markers in `state_dir`, if given, instead of next to the script)."""
    import json
    import os
    import sys

    home = tmp_path / "gcloud"
    if not home.exists():
        home.mkdir()
        (home / "bin").mkdir()
        fake = home / "bin" / "gcloud"
        fake.write_text(FAKE_GCLOUD.format(python=sys.executable))
        fake.chmod(0o755)
    (home / "calls.jsonl").write_text("")
    (home / "plan.json").write_text(json.dumps({"state": "READY", "ssh": ssh_plan}))
    options = {"accelerator_type": "v4-32", "runtime_version": "tpu-ubuntu2204-base",
               "spot": True, "setup": SETUP, "retry_wait": 0, **options}
    script = tmp_path / "launch_tpu.sh"
    script.write_text(remote.cloud_tpu_script(["--preset", "default"], runs, "gs://b/out",
                                              tpu_name="tpu1", zone="z1", **options))
    env = dict(os.environ, FAKE_GCLOUD_HOME=str(home),
               PATH=f"{home / 'bin'}{os.pathsep}{os.environ['PATH']}")
    env.pop("MNMT_LAUNCH_STATE", None)
    if state_dir is not None:
        env["MNMT_LAUNCH_STATE"] = str(state_dir)
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=60)
    calls = [json.loads(line) for line in (home / "calls.jsonl").read_text().splitlines()]
    completed = (home / "completed").read_text().split() if (home / "completed").exists() else []
    return result, calls, completed


def ssh_step(call) -> str | None:
    """What an ssh call ran: a run id, "prepare" or "setup"; None for other calls."""
    if call[3] != "ssh":
        return None
    command = shlex.split(call[-1].removeprefix("--command="))
    if "--run" in command:
        return command[command.index("--run") + 1]
    return "prepare" if "prepare" in command else "setup"


def test_tpu_script_recreates_a_preempted_vm_and_resumes_the_run(tmp_path):
    runs = RUNS[:3]
    ids = [r.run_id for r in runs]
    result, calls, completed = run_tpu_script(tmp_path, {ids[1]: ["preempt"]})
    assert result.returncode == 0, result.stderr
    assert completed == ids  # every run ran to completion exactly once, in order
    verbs = [c[3] for c in calls]
    assert verbs.count("describe") == 1  # read only before the retry
    # after the failed ssh: describe (PREEMPTED) -> delete -> create -> setup -> retry of run 2
    first_fail = [ssh_step(c) for c in calls].index(ids[1])
    after = calls[first_fail + 1:first_fail + 6]
    assert [c[3] for c in after] == ["describe", "delete", "create", "ssh", "ssh"]
    assert "--format=value(state)" in after[0] and "--quiet" in after[1]
    create = after[2]
    assert create[4] == "tpu1" and "--zone=z1" in create and "--spot" in create
    assert "--accelerator-type=v4-32" in create and "--version=tpu-ubuntu2204-base" in create
    assert after[3][-2:] == ["--worker=all", f"--command={SETUP}"]
    assert ssh_step(after[4]) == ids[1] and "--worker=all" in after[4]
    assert [ssh_step(c) for c in calls if c[3] == "ssh"] == \
        ["prepare", ids[0], ids[1], "setup", ids[1], ids[2]]
    assert "TPU tpu1 is PREEMPTED" in result.stderr

    # Run again (e.g. after the machine running the script went away): every step is
    # recorded as finished, so nothing is retrained and no TPU is touched.
    result, calls, completed = run_tpu_script(tmp_path, {})
    assert result.returncode == 0, result.stderr
    assert calls == [] and completed == ids  # `completed` still holds the first run's lines
    assert result.stdout.count("finished before") == len(runs) + 1


def test_tpu_script_skips_a_finished_run_and_gives_up_after_max_attempts(tmp_path):
    runs = RUNS[:3]
    ids = [r.run_id for r in runs]
    state = tmp_path / "state"
    state.mkdir()
    (state / f"{ids[0]}.done").write_text("")  # finished by an earlier launch of this study
    result, calls, completed = run_tpu_script(tmp_path, {ids[1]: [143, 1, 255, 1]},
                                              state_dir=state, max_attempts=3)
    assert result.returncode == 1
    assert f"{ids[1]} failed 3 times (last exit status 255)" in result.stderr
    steps = [ssh_step(c) for c in calls if c[3] == "ssh"]
    assert steps == ["prepare", ids[1], ids[1], ids[1]]  # run 1 skipped, run 3 never started
    assert [c[3] for c in calls].count("describe") == 2  # before each retry; READY: no recreate
    assert not {"delete", "create", "start"} & {c[3] for c in calls}
    assert completed == []



def test_tpu_script_does_not_retry_a_diverged_run(tmp_path):
    ids = [r.run_id for r in RUNS[:3]]
    result, calls, completed = run_tpu_script(tmp_path, {ids[1]: [3]})
    assert result.returncode == 3
    assert f"{ids[1]} failed with exit status 3" in result.stderr
    assert [ssh_step(c) for c in calls] == ["prepare", ids[0], ids[1]]  # no describe, no retry
    assert completed == ids[:1]


def test_launch_command_passes_the_retry_options_to_the_script(tmp_path, capsys):
    from mnmt.study.cli import main

    script = tmp_path / "tpu.sh"
    common = ["launch", "--preset", "ci", "--out", "/o", "--target", "tpu", "--script", str(script),
              "--tpu-name", "t", "--zone", "z"]
    assert main([*common, "--accelerator-type", "v5litepod-16", "--runtime-version", "v2-alpha",
                 "--spot", "--setup", "echo ready", "--max-attempts", "7",
                 "--retry-wait", "0"]) == 0
    text = script.read_text()
    for line in ("ACCELERATOR_TYPE=v5litepod-16", "RUNTIME_VERSION=v2-alpha",
                 "CREATE_FLAGS=(--spot)", "SETUP='echo ready'", "MAX_ATTEMPTS=7", "RETRY_WAIT=0"):
        assert line in text.splitlines(), line
    assert main([*common, "--spot"]) == 2
    assert "--spot needs --accelerator-type" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*common, "--max-attempts", "0"])
