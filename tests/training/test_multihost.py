"""Two processes on localhost train one model data-parallel (JAX CPU collectives, gloo) and
match a single-process run that reads the same two input shards."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from run_helpers import HERE, rows_by_key, write_child_spec

from mnmt.training import run_files


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration  # real processes and collectives; ≈ 50 s on 2 idle cores
def test_two_process_data_parallel_matches_single_process(make_config, tiny_data, tmp_path):
    from mnmt.training.trainer import train

    steps = dict(train_steps=6, eval={"period": 3}, checkpoint={"period": 3}, log_every=1)
    single = make_config("single", inputs={"shards": 2}, run_id="mh", **steps)
    train(single, progress=lambda e: None)

    multi = make_config("multi", run_id="mh", **steps)
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE] + sys.path),
               XLA_FLAGS="--xla_force_host_platform_device_count=1")
    procs = []
    for pid in range(2):
        spec = write_child_spec(multi, tiny_data, tmp_path, coordinator=f"127.0.0.1:{port}",
                     num_processes=2, process_id=pid)
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "_child_run.py"), spec],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=env))
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=400)
            assert p.returncode == 0, err[-3000:]
            outs.append(json.loads(out.strip().splitlines()[-1])[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [o["status"] for o in outs] == ["finished", "finished"]
    run = run_files.read_run_json(multi.model_dir)
    assert run["training"]["num_processes"] == 2
    a = rows_by_key(run_files.read_metrics(single.model_dir))
    b = rows_by_key(run_files.read_metrics(multi.model_dir))
    assert a.keys() == b.keys()
    for k, v in a.items():
        assert b[k] == pytest.approx(v, rel=2e-4, abs=1e-6), k
    # both processes report the same final evaluation
    assert outs[0]["final_eval"] == pytest.approx(outs[1]["final_eval"])
