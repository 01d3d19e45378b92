"""The output directory's lock: a second `mnmt-study run` on one OUT is refused at once, in one
line naming the holder; a SIGKILLed holder leaves no stuck lock; `run-one` processes share it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mnmt.study import cli as study
from mnmt.study import lock
from mnmt.study.spec import expand

REPO = Path(__file__).resolve().parents[2]
HOLDER = """
import sys, time
from mnmt.study import lock
lock.acquire(sys.argv[1], sys.argv[2], shared=sys.argv[3] == "shared")
print("locked", flush=True)
time.sleep(120)
"""


@pytest.fixture
def holder():
    """Start a child process that takes OUT's lock through `lock.acquire` and sleeps."""
    children = []

    def start(out: Path, command: str = "run", mode: str = "exclusive") -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + sys.path))
        child = subprocess.Popen([sys.executable, "-c", HOLDER, str(out), command, mode],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env)
        children.append(child)
        line = child.stdout.readline()
        assert line.strip() == "locked", child.stderr.read()
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()


def _snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_second_run_is_refused_at_once_naming_the_holder(holder, tmp_path, capsys):
    out = tmp_path / "study"
    child = holder(out, "run")
    (out / "study.json").write_text('{"written": "by the holder"}\n')
    before = _snapshot(out)
    t0 = time.monotonic()
    code = study.main(["run", "--preset", "ci", "--out", str(out)])
    elapsed = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == study.EXIT_IN_USE != 0
    assert err.count("\n") == 1 and err.startswith("mnmt-study: error: "), err
    assert f"pid {child.pid}" in err and f"host {socket.gethostname()}" in err
    assert "started 20" in err and "mnmt-study run " in err
    assert str(out / lock.LOCK_FILE) in err
    assert elapsed < 10, f"refused after {elapsed:.1f} s: it waited for the lock"
    assert _snapshot(out) == before  # nothing written, not even the holder record


def test_lock_of_a_sigkilled_holder_is_taken_again_at_once(holder, tmp_path):
    out = tmp_path / "study"
    child = holder(out, "run")
    with pytest.raises(lock.DirectoryInUse, match=f"pid {child.pid}"):
        lock.acquire(out, "run")
    child.send_signal(signal.SIGKILL)
    child.wait()
    t0 = time.monotonic()
    with lock.acquire(out, "run") as mine:
        assert time.monotonic() - t0 < 1.0
        assert mine.held
        records = lock.holders(out)
        assert [r["pid"] for r in records] == [os.getpid()]  # the dead holder's record is gone
    assert not mine.held


def test_cli_releases_its_lock_when_the_command_ends(tmp_path, capsys):
    out = tmp_path / "study"
    # The study file of another study makes `run` stop right after taking the lock.
    out.mkdir()
    (out / "study.json").write_text('{"name": "another"}')
    assert study.main(["run", "--preset", "ci", "--out", str(out)]) == study.EXIT_USAGE
    assert "holds a different study" in capsys.readouterr().err
    child = subprocess.run(
        [sys.executable, "-c", "import sys; from mnmt.study import lock; "
         "lock.acquire(sys.argv[1], 'run'); print('ok')", str(out)],
        capture_output=True, text=True, timeout=60,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + sys.path)))
    assert child.stdout.strip() == "ok", child.stderr


def test_run_one_processes_share_the_lock_and_exclude_run(holder, tmp_path, capsys):
    out = tmp_path / "study"
    first = holder(out, "run-one", "shared")
    second = holder(out, "run-one", "shared")  # e.g. the second host of a multi-host run
    code = study.main(["run", "--preset", "ci", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == study.EXIT_IN_USE
    assert f"pid {second.pid}" in err and "run-one" in err and "1 other process" in err
    assert {r["pid"] for r in lock.holders(out)} == {first.pid, second.pid}
    code = study.main(["prepare", "--preset", "ci", "--out", str(out)])
    assert code == study.EXIT_IN_USE and f"pid {second.pid}" in capsys.readouterr().err


def test_run_one_is_refused_while_a_run_holds_the_directory(holder, tmp_path, capsys):
    out = tmp_path / "study"
    child = holder(out, "run")
    run_id = expand(study.load_spec(None, "ci", []))[0].run_id
    code = study.main(["run-one", "--preset", "ci", "--run", run_id, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == study.EXIT_IN_USE and f"pid {child.pid}" in err and "mnmt-study run " in err
    assert sorted(p.name for p in out.iterdir()) == [lock.LOCK_FILE]

