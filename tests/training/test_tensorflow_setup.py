"""mnmt.tensorflow_setup: TensorFlow sees no GPU; only its benign native start-up lines are dropped."""

import os
import sys

import pytest

from mnmt import tensorflow_setup


def test_native_benign_lines_are_dropped_and_everything_else_kept(capfd):
    with tensorflow_setup.filtered_native_stderr():
        os.write(2, b"W0000 cudart_stub.cc:31] Could not find cuda drivers on your machine\n")
        os.write(2, b"E0000 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)\n")
        os.write(2, b"E0000 something.cc:1] a real native error\n")
        print("a Python warning on stderr", file=sys.stderr)
    err = capfd.readouterr().err
    assert "a real native error" in err and "a Python warning on stderr" in err
    assert "cuda drivers" not in err and "cuInit" not in err


def test_stderr_is_restored_and_output_kept_when_the_block_raises(capfd):
    with pytest.raises(ImportError, match="boom"):
        with tensorflow_setup.filtered_native_stderr():
            os.write(2, b"said before failing\n")
            raise ImportError("boom")
    os.write(2, b"after the block\n")
    err = capfd.readouterr().err
    assert err.index("said before failing") < err.index("after the block")


def test_start_tensorflow_hides_gpus_once(monkeypatch):
    tf = pytest.importorskip("tensorflow")
    calls = []
    monkeypatch.setattr(tensorflow_setup, "_started", False)
    monkeypatch.setattr(tf.config, "set_visible_devices",
                        lambda devices, kind=None: calls.append((list(devices), kind)))
    assert tensorflow_setup.start_tensorflow() is tf
    assert tensorflow_setup.start_tensorflow() is tf
    assert calls == [([], "GPU")]


def test_a_fresh_process_starting_tensorflow_prints_no_native_startup_lines():
    import subprocess

    pytest.importorskip("tensorflow")
    code = ("import sys\n"
            "from mnmt.tensorflow_setup import start_tensorflow\n"
            "start_tensorflow()\n"
            "import tensorflow as tf\n"
            "assert list(tf.data.Dataset.range(2).as_numpy_iterator()) == [0, 1]\n"
            "print('started', file=sys.stderr)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",
                                                           "TF_ENABLE_ONEDNN_OPTS")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == ["started"], proc.stderr[-2000:]
