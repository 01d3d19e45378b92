"""`import fitting` (and its report/CLI modules) must not import jax, tensorflow or mnmt."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["fitting", "fitting.report", "fitting.cli", "fitting.joint",
                                    "fitting.tables"])
def test_no_heavy_imports(module):
    code = (
        f"import importlib, sys; importlib.import_module({module!r}); "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'tensorflow', 'mnmt',"
        " 'flax', 'seqio')); print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} imported {out.stdout.strip()}"
