"""Background processes that generate and tokenize unlimited synthetic training streams.

Generating a synthetic sentence pair is pure Python (~15 µs); with one process per task stream
the training iterator's own process only mixes and packs, so on a machine with free cores the
input rate scales with the number of pairs. The process produces exactly the examples the
in-process stream would (same family, same stream seed, same start), in order: determinism and
checkpointed positions are unchanged (examples prepared but not consumed are dropped on close).
"""

from __future__ import annotations

import multiprocessing as mp
import queue
from collections import deque
from itertools import islice
from typing import Any

__all__ = ["ProcessStream"]

_BLOCK = 256


def _worker(preset: str, family_seed: int, pair: str, start: int, stream_seed: Any,
            model_proto: bytes, lang_id: int, out_q, stop) -> None:  # pragma: no cover - subprocess
    import sentencepiece as spm

    from mnmt.data.synthetic import get_family
    from mnmt.data.vocab import example_encoder

    fam = get_family(preset, seed=family_seed)
    encode = example_encoder(spm.SentencePieceProcessor(model_proto=model_proto), lang_id)
    it = fam.iter_texts(pair, "train", start=start, seed=stream_seed)
    try:
        while not stop.is_set():
            items = [encode(s, t) for s, t in islice(it, _BLOCK)]
            while not stop.is_set():
                try:
                    out_q.put(items, timeout=0.1)
                    break
                except queue.Full:
                    continue
    except BaseException as e:  # reported to the parent
        out_q.put(("error", repr(e)))


class ProcessStream:
    """Tokenized examples of one synthetic train stream, made in a spawned process."""

    def __init__(self, preset: str, family_seed: int, pair: str, start: int, stream_seed: Any,
                 model_proto: bytes, lang_id: int, depth: int = 8) -> None:
        ctx = mp.get_context("spawn")  # fork is unsafe once TensorFlow / JAX threads exist
        self._q = ctx.Queue(maxsize=depth)
        self._stop = ctx.Event()
        self._proc = ctx.Process(
            target=_worker, name=f"mnmt-stream-{pair}", daemon=True,
            args=(preset, family_seed, pair, start, stream_seed, model_proto, lang_id,
                  self._q, self._stop),
        )
        self._proc.start()
        self._buf: deque = deque()

    def take(self, n: int) -> list[tuple[list[int], list[int]]]:
        while len(self._buf) < n:
            try:
                item = self._q.get(timeout=60)
            except queue.Empty:
                alive = self._proc.is_alive()
                raise RuntimeError(
                    f"synthetic stream process {self._proc.name} produced nothing for 60 s "
                    f"(alive: {alive}, exit code {self._proc.exitcode})"
                ) from None
            if isinstance(item, tuple) and item and item[0] == "error":
                raise RuntimeError(f"synthetic stream process {self._proc.name} failed: {item[1]}")
            self._buf.extend(item)
        return [self._buf.popleft() for _ in range(n)]

    def close(self) -> None:
        self._stop.set()
        try:
            while True:
                self._q.get_nowait()
        except (queue.Empty, OSError, ValueError):
            pass
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(timeout=5)
