"""Per-host training input (SeqIO `ShardInfo` sharding) with a checkpointable position.

The global batch of `batch_size` rows is made of `num_shards` equal slices, slice i coming from
the input pipeline opened with `seqio.ShardInfo(index=i, num_shards=num_shards)`. Each process
reads only its own contiguous range of slices (so `num_shards` must be a multiple of the number
of processes), which is the layout `jax.make_array_from_process_local_data` expects for a batch
split over the `data` mesh axis. By default `num_shards` equals the process count; choosing it
explicitly makes a one-process run see exactly the data of a multi-process one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


class HostInputs:
    """This process's share of the global training batch; `get_state`/`set_state` per slice."""

    def __init__(
        self,
        make_pipeline: Callable[..., Any],
        *,
        mixture_or_task: str,
        feature_lengths: Mapping[str, int],
        batch_size: int,
        seed: int,
        num_shards: int,
        process_index: int,
        process_count: int,
        prefetch: int = 0,
    ):
        if num_shards < 1 or num_shards % process_count:
            raise ValueError(f"input shards ({num_shards}) must be a positive multiple of the "
                             f"process count ({process_count})")
        if batch_size % num_shards:
            raise ValueError(f"batch_size {batch_size} is not divisible by the {num_shards} "
                             "input shards")
        import seqio  # noqa: PLC0415

        per_host = num_shards // process_count
        self.shard_indices = list(range(process_index * per_host, (process_index + 1) * per_host))
        self.num_shards = num_shards
        self.rows_per_shard = batch_size // num_shards
        self.pipelines = []
        for i in self.shard_indices:
            shard_info = None if num_shards == 1 else seqio.ShardInfo(index=i, num_shards=num_shards)
            # TrainInputs takes the *global* batch size and yields batch_size // num_shards rows.
            kwargs = {"prefetch": prefetch} if prefetch else {}
            self.pipelines.append(make_pipeline(mixture_or_task, dict(feature_lengths),
                                                batch_size, seed, shard_info=shard_info,
                                                **kwargs))

    @property
    def tasks(self) -> list[str]:
        """The tasks drawn (positive weight, mixture order): task id k + 1 in the batches'
        ``decoder_task_ids`` is ``tasks[k]`` (the same for every slice)."""
        return list(self.pipelines[0].tasks)

    def __iter__(self) -> HostInputs:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        parts = [next(p) for p in self.pipelines]
        if len(parts) == 1:
            return {k: np.asarray(v) for k, v in parts[0].items()}
        return {k: np.concatenate([np.asarray(p[k]) for p in parts], axis=0) for k in parts[0]}

    def close(self) -> None:
        """Stop the pipelines' prefetch threads (if any)."""
        for p in self.pipelines:
            close = getattr(p, "close", None)
            if close is not None:
                close()

    def get_state(self) -> dict[str, Any]:
        """Positions of this process's slices, keyed by global shard index."""
        return {str(i): p.get_state() for i, p in zip(self.shard_indices, self.pipelines,
                                                      strict=True)}

    def set_state(self, states: Mapping[str, Any]) -> None:
        missing = [i for i in self.shard_indices if str(i) not in states]
        if missing:
            raise ValueError(f"checkpoint has no input position for shard(s) {missing} of "
                             f"{self.num_shards}; was it written with a different number of "
                             "input shards?")
        for i, p in zip(self.shard_indices, self.pipelines, strict=True):
            p.set_state(states[str(i)])


def gather_input_states(local: Mapping[str, Any]) -> dict[str, Any]:
    """Merge every process's `get_state()` so the primary process can checkpoint all of them."""
    import jax  # noqa: PLC0415

    if jax.process_count() == 1:
        return dict(local)
    import json  # noqa: PLC0415

    from jax.experimental import multihost_utils  # noqa: PLC0415

    data = np.frombuffer(json.dumps(local).encode("utf-8"), np.uint8)
    lengths = multihost_utils.process_allgather(np.array([data.size], np.int32))
    width = int(np.max(lengths))
    padded = np.zeros((width,), np.uint8)
    padded[: data.size] = data
    everything = multihost_utils.process_allgather(padded)
    merged: dict[str, Any] = {}
    for row, n in zip(np.asarray(everything).reshape(-1, width),
                      np.asarray(lengths).reshape(-1), strict=True):
        merged.update(json.loads(bytes(row[: int(n)]).decode("utf-8")))
    return merged
