"""Progress reporting for training: steps/s, tokens/s, MFU, ETA; TensorBoard summaries.

MFU (model FLOPs utilisation) = achieved model FLOPs per second / peak FLOPs per second, where
the model FLOPs of a step come from `mnmt.models.accounting.train_flops_per_example` (6N per
token plus the attention terms) and the peak is either given or measured once per process with
a large float32 matmul on the local devices (`measure_matmul_peak`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import sys
import time
from collections.abc import Mapping

log = logging.getLogger("mnmt.training.train")


@dataclasses.dataclass(frozen=True)
class ProgressEvent:
    """One progress report of a training run."""

    run_id: str
    step: int
    total_steps: int
    loss: float | None             # mean training loss over the last report window
    learning_rate: float | None
    steps_per_s: float | None
    tokens_per_s: float | None     # target tokens (non-padding) per second
    mfu: float | None
    eta_s: float | None
    tokens: int
    elapsed_s: float
    kind: str = "train"            # "train", "eval", "decode" (progress of a long decode),
                                   # "checkpoint", "done"
    eval_losses: Mapping[str, float] | None = None
    message: str = ""


def format_event(e: ProgressEvent) -> str:
    """One human-readable line for a progress event."""
    head = f"[{e.run_id}] step {e.step}/{e.total_steps}"
    if e.kind == "eval" and e.eval_losses:
        body = " ".join(f"{k}={v:.4f}" for k, v in sorted(e.eval_losses.items()))
        return f"{head} eval {body}"
    if e.kind != "train":
        return f"{head} {e.message}"
    return (f"{head} loss {_f(e.loss, '.4f')} lr {_f(e.learning_rate, '.2e')} "
            f"{_f(e.steps_per_s, '.2f')} steps/s {_f(e.tokens_per_s, ',.0f')} tok/s "
            f"MFU {_f(None if e.mfu is None else 100 * e.mfu, '.1f')}% "
            f"ETA {format_duration(e.eta_s)}")


def _f(value: float | None, spec: str) -> str:
    return "?" if value is None or not math.isfinite(value) else format(value, spec)


def format_duration(seconds: float | None) -> str:
    """`1:02:03`, `4:05`, or `?` for an unknown duration (None, NaN, inf)."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def print_progress(event: ProgressEvent) -> None:
    """Default progress callback: one line on stderr and in the `mnmt.training.train` log."""
    line = format_event(event)
    print(line, file=sys.stderr, flush=True)
    log.info(line)


@functools.cache
def measure_matmul_peak(n: int = 1024, repeats: int = 5) -> float:
    """Best observed float32 FLOP/s of an n×n matmul on all local devices (cached per process)."""
    import jax  # noqa: PLC0415  (only here: the rest of this module is light, for mnmt.study)
    import jax.numpy as jnp  # noqa: PLC0415

    devices = jax.local_devices()
    fn = jax.jit(lambda a, b: a @ b)
    best = 0.0
    for d in devices[:1]:
        a = jax.device_put(jnp.ones((n, n), jnp.float32), d)
        b = jax.device_put(jnp.ones((n, n), jnp.float32), d)
        fn(a, b).block_until_ready()
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn(a, b).block_until_ready()
            dt = time.perf_counter() - t0
            best = max(best, 2.0 * n**3 / dt)
    return best * len(devices)


class RateMeter:
    """Steps/s and tokens/s over a window since the last report; ETA from the overall rate."""

    def __init__(self, start_step: int, start_tokens: int, total_steps: int,
                 flops_per_step: float, peak: float):
        self.total_steps = total_steps
        self.flops_per_step = flops_per_step
        self.peak = peak
        self._t0 = time.perf_counter()
        self._last_t = self._t0
        self._last_step = start_step
        self._last_tokens = start_tokens
        self._start_step = start_step

    def report(self, step: int, tokens: int) -> tuple[float, float, float, float]:
        """(steps/s, tokens/s, mfu, eta_s) since the previous call."""
        now = time.perf_counter()
        dt = max(now - self._last_t, 1e-9)
        steps = step - self._last_step
        sps = steps / dt
        tps = (tokens - self._last_tokens) / dt
        mfu = sps * self.flops_per_step / self.peak if self.peak > 0 else float("nan")
        overall = (step - self._start_step) / max(now - self._t0, 1e-9)
        eta = (self.total_steps - step) / overall if overall > 0 else float("inf")
        self._last_t, self._last_step, self._last_tokens = now, step, tokens
        return sps, tps, mfu, eta

    def reset(self, step: int, tokens: int) -> None:
        """Start the rate window (and the ETA clock) afresh at `step`, e.g. after compilation."""
        self._t0 = self._last_t = time.perf_counter()
        self._start_step = self._last_step = step
        self._last_tokens = tokens

    def restart_window(self) -> None:
        """Exclude time spent outside training steps (evaluation, checkpoints) from the rates.

        The ETA keeps counting that time: it is part of what the rest of the run will take.
        """
        self._last_t = time.perf_counter()


class SummaryWriters:
    """TensorBoard event files under MODEL_DIR/events/{train,eval} (primary process only)."""

    def __init__(self, events_dir: str, enabled: bool = True):
        self._writers = {}
        self._enabled = enabled
        self._dir = events_dir

    def _writer(self, name: str):
        if name not in self._writers:
            import tensorflow as tf  # noqa: PLC0415

            self._writers[name] = tf.summary.create_file_writer(f"{self._dir}/{name}")
        return self._writers[name]

    def scalars(self, name: str, step: int, values: Mapping[str, float]) -> None:
        if not self._enabled or not values:
            return
        import tensorflow as tf  # noqa: PLC0415

        with self._writer(name).as_default():
            for tag, v in values.items():
                if v is not None and math.isfinite(v):
                    tf.summary.scalar(tag, float(v), step=int(step))

    def text(self, name: str, step: int, tag: str, value: str) -> None:
        if not self._enabled:
            return
        import tensorflow as tf  # noqa: PLC0415

        with self._writer(name).as_default():
            tf.summary.text(tag, value, step=int(step))

    def flush(self) -> None:
        for w in self._writers.values():
            w.flush()

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()
