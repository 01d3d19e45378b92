"""The training iterator's position as JSON: its version, and what a restored one must match.

:meth:`mnmt.data.pipeline.TrainInputs.get_state` writes the position with the iterator's
identity (mixture, seed, shard, packing, lengths, batch size, architecture, decoder-only
options, the contents of the token caches it reads); :func:`check_restorable` says, naming the
field, why a checkpoint's position cannot continue an iterator, so a restored run never reads
other examples than the run it continues.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["STATE_VERSION", "check_restorable"]

# 2: finite sets in EpochOrder (the same order with and without a token cache); version 1
# states were written with another order (a numpy permutation in memory, index_shuffle cached).
STATE_VERSION = 2

# The fields a restored position must have exactly as the iterator has them.
_SAME_FIELDS = ("mixture_or_task", "seed", "shard", "pack", "feature_lengths", "batch_size")


def check_restorable(state: Mapping[str, Any], own: Mapping[str, Any]) -> None:
    """Raise ValueError unless the position ``state`` (a checkpoint's) can continue the iterator
    whose own position is ``own`` (both as ``get_state`` writes them): same version, architecture,
    identity fields, decoder-only options, token-cache contents and tasks."""
    if state.get("version") != STATE_VERSION:
        raise ValueError(
            f"input state: version {state.get('version')!r}, this iterator reads version "
            f"{STATE_VERSION}" + (" (version 1 visited finite training sets in another "
                                  "order: the run cannot continue on the same examples; "
                                  "start it again, or finish it with the mnmt release "
                                  "that began it)" if state.get("version") == 1 else ""))
    architecture = own.get("architecture", "encoder_decoder")
    if state.get("architecture", "encoder_decoder") != architecture:
        raise ValueError(f"input state field 'architecture': checkpoint has "
                         f"{state.get('architecture', 'encoder_decoder')!r}, iterator has "
                         f"{architecture!r}")
    for k in _SAME_FIELDS:
        if state.get(k) != own[k]:
            raise ValueError(f"input state field {k!r}: checkpoint has {state.get(k)!r}, iterator has {own[k]!r}")
    if state.get("decoder_format") != own.get("decoder_format"):
        raise ValueError(f"input state field 'decoder_format': checkpoint has "
                         f"{state.get('decoder_format')!r}, iterator has "
                         f"{own.get('decoder_format')!r} (the InputConfig decoder-only options "
                         "must stay those the run began with)")
    digests = own.get("cache_contents", {})
    changed = [t for t, digest in state.get("cache_contents", {}).items()
               if t in digests and digests[t] != digest]
    if changed:
        raise ValueError(f"input state field 'cache_contents': the token caches of {changed} "
                         "were rebuilt with other contents or shards since the checkpoint "
                         "(the same stream position would be other examples): restore "
                         "that cache or start the run again")
    if set(state["cursors"]) != set(own["tasks"]):
        raise ValueError(
            f"input state: tasks {sorted(state['cursors'])} differ from the mixture's {sorted(own['tasks'])}"
        )
