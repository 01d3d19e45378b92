"""`mnmt-study run --workers N`: groups trained side by side in worker processes, one per core."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mnmt.study.workers import worker_environment

pytestmark = pytest.mark.integration

# two groups (one per size) of one run each, short enough for a test, long enough to be killed
STUDY = ["--preset", "ci", "--gin", 'StudySpec.sizes=("micro-1", "micro-2")',
         "--gin", "StudySpec.train_steps=120", "--gin", "StudySpec.eval_every=40",
         "--gin", "StudySpec.checkpoint_every=40", "--gin", "StudySpec.decode_at_end=False"]
TIMING = {"steps_per_s", "tokens_per_s", "step_time_s", "wall_s", "elapsed_s"}


def study_cmd(out: Path, workers: int) -> list[str]:
    return [sys.executable, "-m", "mnmt.study.cli", "run", *STUDY, "--out", str(out),
            "--workers", str(workers)]


def rows(out: Path) -> dict[str, dict[tuple, float]]:
    """run id -> (step, task, eval set, metric) -> value; fails on a duplicated row."""
    found = {}
    for run_dir in sorted((out / "runs").iterdir()):
        table = {}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            row = json.loads(line)
            key = (row["step"], row["task"], row["eval_set"], row["metric"])
            assert key not in table, f"{run_dir.name}: duplicated row {key}"
            table[key] = row["value"]
        found[run_dir.name] = table
    return found


def assert_same_metrics(got: dict, want: dict, rel: float) -> None:
    assert set(got) == set(want)
    for run in want:
        assert set(got[run]) == set(want[run]), run
        for key, value in want[run].items():
            if key[3] not in TIMING and "time" not in key[3]:
                assert got[run][key] == pytest.approx(value, rel=rel, abs=1e-6), (run, key)


def final_losses(table: dict) -> dict:
    last = max(step for step, *_ in table)
    return {k: v for k, v in table.items() if k[0] == last and k[3] == "loss"}


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    out = tmp_path_factory.mktemp("w2") / "study"
    proc = subprocess.run(study_cmd(out, 2), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc.stderr


def test_worker_environment_keeps_xla_on_one_thread():
    env = worker_environment({"XLA_FLAGS": "--xla_dump_to=/tmp/x"})
    assert env["XLA_FLAGS"].startswith("--xla_dump_to=/tmp/x ")
    assert "--xla_cpu_multi_thread_eigen=false" in env["XLA_FLAGS"]
    mine = worker_environment({"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=true"})
    assert mine["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=true"  # a user's choice is kept


@pytest.mark.slow  # ≈ 2.5 min on 2 cores (two studies); -m slow; the main job runs two workers
def test_two_workers_write_the_rows_one_process_writes(two_workers, tmp_path):
    out, stderr = two_workers
    assert "2 worker processes" in stderr
    assert " w0 " in stderr and " w1 " in stderr  # both workers trained a group
    for run_dir in (out / "runs").iterdir():
        assert json.loads((run_dir / "run.json").read_text())["status"] == "finished"
    assert (out / "report" / "fits.json").exists()
    one = tmp_path / "study"
    proc = subprocess.run(study_cmd(one, 1), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "worker processes" not in proc.stderr
    got, want = rows(out), rows(one)
    assert {r: set(t) for r, t in got.items()} == {r: set(t) for r, t in want.items()}
    # a worker's XLA sums on one thread, in another order than the thread pool's: float noise,
    # amplified by training, so the values agree closely but not to the last digit
    for run in want:
        for key, value in final_losses(want[run]).items():
            assert got[run][key] == pytest.approx(value, rel=0.1), (run, key)


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow  # ≈ 2.5 min on 2 cores (a study killed and run again); -m slow
@pytest.mark.skipif(not Path("/proc").exists(), reason="needs /proc (Linux)")
def test_workers_die_with_a_killed_study_and_the_rerun_completes(two_workers, tmp_path):
    out = tmp_path / "study"
    parent = subprocess.Popen(study_cmd(out, 2), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    # kill once both runs have evaluated at step 40 (training, checkpoints written or due)
    while time.monotonic() < deadline:
        files = list((out / "runs").glob("*/metrics.jsonl")) if (out / "runs").exists() else []
        if len(files) == 2 and all('"step": 40' in f.read_text() for f in files):
            break
        assert parent.poll() is None, "the study ended before it could be killed"
        time.sleep(0.2)
    else:
        pytest.fail("the runs never reached step 40")
    workers = [pid for pid in _children(parent.pid) if _alive(pid)]
    assert workers, "no worker processes"
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 120
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in workers), "workers outlived the killed study"
    proc = subprocess.run(study_cmd(out, 2), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # resumed from the workers' checkpoints: the uninterrupted study's rows, none lost or twice
    assert_same_metrics(rows(out), rows(two_workers[0]), rel=1e-5)
