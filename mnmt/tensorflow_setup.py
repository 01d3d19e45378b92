"""TensorFlow as SeqIO's CPU-only data backend: hidden from accelerators, quiet at start-up.

`mnmt` uses TensorFlow only for input pipelines and file I/O; JAX owns the accelerators. As in
T5X's `train.py`, TensorFlow is told to see no GPU, so that on a GPU machine it neither reserves
device memory nor competes with XLA for it. Importing TensorFlow, and its first look for CUDA,
also print native log lines (from before absl's logging is initialised, so `TF_CPP_MIN_LOG_LEVEL`
does not reach them) that say no GPU was found, or that TensorFlow's CPU kernels use oneDNN — on a
CPU machine, expected and harmless, but they bury the first progress lines. `start_tensorflow`
drops exactly those lines and passes every other line through.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

# Native start-up lines that only say "no CUDA here" (TensorFlow's stream executor and absl) or
# "oneDNN is on".
BENIGN_STARTUP_LINES: tuple[str, ...] = (
    "All log messages before absl::InitializeLog() is called are written to STDERR",
    "Could not find cuda drivers on your machine",
    "failed call to cuInit",
    "Unable to register cuDNN factory",
    "Unable to register cuFFT factory",
    "Unable to register cuBLAS factory",
    "computation placer already registered",
    "TF-TRT Warning: Could not find TensorRT",
    # TensorFlow's CPU kernels use oneDNN; only our data pipelines run on them.
    "oneDNN custom operations are on",
)

_started = False


@contextlib.contextmanager
def native_stderr_to(file: Any) -> Iterator[None]:
    """Point file descriptor 2 (native and Python writes alike, and child processes started in
    the block) at an open binary `file` for the duration of the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def filtered_native_stderr(drop: Sequence[str] = BENIGN_STARTUP_LINES) -> Iterator[None]:
    """Capture file descriptor 2 for the duration of the block, then write back every captured
    line that contains none of the `drop` substrings."""
    with tempfile.TemporaryFile() as captured:
        try:
            with native_stderr_to(captured):
                yield
        finally:
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not any(pattern in line for pattern in drop):
                    sys.stderr.write(line)
            sys.stderr.flush()


def start_tensorflow() -> Any:
    """Import TensorFlow once, hide every GPU from it, and return the module.

    Idempotent. Call before the first input pipeline is built; if TensorFlow already initialised
    its devices (e.g. the caller ran TF ops first), its device list is left as it is.
    """
    global _started
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if _started:
        import tensorflow as tf  # noqa: PLC0415

        return tf
    with filtered_native_stderr():
        import tensorflow as tf  # noqa: PLC0415

        try:
            tf.config.set_visible_devices([], "GPU")
        except (RuntimeError, ValueError):  # devices already initialised by the caller
            pass
    _started = True
    return tf
