"""Launch scripts for Cloud TPU and SLURM: one command per run, data prepared once, valid bash."""

import shlex
import subprocess

import pytest

from launch import remote
from mnmt.study.spec import PRESETS, expand

RUNS = expand(PRESETS["default"])


def bash_syntax_ok(text: str, tmp_path) -> bool:
    path = tmp_path / "script.sh"
    path.write_text(text)
    return subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


def test_tpu_script_prepares_once_then_runs_every_run_on_all_workers(tmp_path):
    text = remote.cloud_tpu_script(["--preset", "default"], RUNS, "/mnt/out dir",
                                   tpu_name="v4-32", zone="us-central2-b", project="p")
    assert bash_syntax_ok(text, tmp_path)
    commands = [shlex.split(line) for line in text.splitlines() if line.startswith("gcloud")]
    assert len(commands) == len(RUNS) + 1
    assert "--worker=0" in commands[0] and "prepare" in commands[0][-1]
    for run, argv in zip(RUNS, commands[1:], strict=True):
        assert "--worker=all" in argv and "--project=p" in argv
        remote_argv = shlex.split(argv[-1].removeprefix("--command="))
        assert remote_argv[remote_argv.index("--run") + 1] == run.run_id
        assert remote_argv[remote_argv.index("--out") + 1] == "/mnt/out dir"


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
