"""What the benchmark scripts share (not a benchmark itself): where the repository and the data
sets lie, and the description of the machine a result was measured on.

The scripts are run by path (`python benchmarks/ROOM/NAME.py`) and loaded by path in the tests,
so each puts the repository root on `sys.path` before `from benchmarks.common import machine`.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path

__all__ = ["DATA", "ROOT", "SHARED_DATA", "machine"]

#: the repository root (benchmarks/ is one level below it)
ROOT = Path(__file__).resolve().parents[1]
#: public data vendored in the repository (benchmarks/data/README.md)
DATA = ROOT / "benchmarks" / "data"
#: larger public data sets beside the repository (../shared/data)
SHARED_DATA = ROOT.parent / "shared" / "data"


def machine(keys: Mapping[str, str] | None = None) -> dict:
    """The machine a result was measured on: platform, architecture, processor, Python, CPU count
    (and the CPUs this process may use), CPU model and memory where Linux says them, load average.

    ``keys``: {key here: the script's own key} for a script whose JSON names them otherwise
    (e.g. ``{"cpus": "cpu_count", "load_avg": "loadavg"}``): only those, under its names."""
    info = {"platform": platform.platform(), "arch": platform.machine(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            info["cpu_model"] = next((ln.split(":", 1)[1].strip() for ln in f
                                      if ln.startswith("model name")), platform.processor())
        with open("/proc/meminfo", encoding="utf-8") as f:
            kb = int(next(ln for ln in f if ln.startswith("MemTotal")).split()[1])
        info["mem_total_gb"] = round(kb / 2**20, 1)
    except (OSError, StopIteration, ValueError):  # pragma: no cover - not Linux
        info.setdefault("cpu_model", platform.processor())
    try:
        info["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        pass
    return info if keys is None else {theirs: info.get(ours) for ours, theirs in keys.items()}
