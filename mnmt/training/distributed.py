"""Multi-host start-up: `jax.distributed.initialize` when the job spans several processes.

Explicit settings (`--coordinator_address/--num_processes/--process_id` of `mnmt-train`, or the
environment variables MNMT_COORDINATOR_ADDRESS, MNMT_NUM_PROCESSES, MNMT_PROCESS_ID) take
precedence; otherwise JAX's own cluster detection is used where a cluster environment is
visible (Cloud TPU multi-host slices, SLURM with more than one task). On CPU the cross-process
collectives use gloo. Must run before the first JAX computation of the process.
"""

from __future__ import annotations

import logging
import os

import jax

log = logging.getLogger(__name__)
_INITIALISED = False


def _cluster_detected() -> bool:
    if int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1:
        return True
    hosts = os.environ.get("TPU_WORKER_HOSTNAMES", "")
    return "," in hosts


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> bool:
    """Start JAX's distributed runtime if this is a multi-process job; True if it was started."""
    global _INITIALISED
    if _INITIALISED:
        return True
    coordinator_address = coordinator_address or os.environ.get("MNMT_COORDINATOR_ADDRESS")
    if num_processes is None and os.environ.get("MNMT_NUM_PROCESSES"):
        num_processes = int(os.environ["MNMT_NUM_PROCESSES"])
    if process_id is None and os.environ.get("MNMT_PROCESS_ID"):
        process_id = int(os.environ["MNMT_PROCESS_ID"])
    explicit = coordinator_address is not None
    if not explicit and not _cluster_detected():
        return False
    if explicit and (num_processes is None or process_id is None):
        raise ValueError("a coordinator address needs num_processes and process_id as well "
                         "(flags --num_processes/--process_id or MNMT_NUM_PROCESSES/"
                         "MNMT_PROCESS_ID)")
    if explicit and num_processes == 1:
        return False
    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except Exception:  # option absent on some jax versions; gloo is then the default
        pass
    if explicit:
        jax.distributed.initialize(coordinator_address=coordinator_address,
                                   num_processes=num_processes, process_id=process_id)
    else:
        jax.distributed.initialize()
    _INITIALISED = True
    log.info("jax.distributed initialised: process %d of %d, %d global devices",
             jax.process_index(), jax.process_count(), jax.device_count())
    return True
