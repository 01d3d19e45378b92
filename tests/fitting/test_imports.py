"""`import fitting` (and its report/CLI modules) must not import jax, tensorflow or mnmt."""

import json
import os
import subprocess
import sys

import pytest

HEAVY = ("jax", "tensorflow", "mnmt", "flax", "seqio")

# One clean interpreter loads the light libraries fitting is allowed (numpy, scipy, pandas,
# matplotlib) once, then forks a child per module: each child imports only that module and
# reports which heavy packages are then loaded. Same check as a fresh interpreter per module,
# without paying numpy/scipy/pandas's import time once per module.
_PROBE = r"""
import importlib, json, os, sys
HEAVY = {heavy!r}

def heavy_loaded():
    return ",".join(sorted(m for m in sys.modules if m.split(".")[0] in HEAVY))

import matplotlib.figure, numpy, pandas, scipy.optimize, scipy.stats
assert not heavy_loaded(), "the light libraries themselves loaded " + heavy_loaded()
results = {{}}
for module in {modules!r}:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(module)
            heavy = heavy_loaded()
            found = "imported " + heavy if heavy else ""
        except BaseException as exc:  # reported, not raised: the parent must go on
            found = "import failed: " + repr(exc)
        os.write(write, ("done:" + found).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        said = pipe.read()
    _, status = os.waitpid(pid, 0)
    ok = said.startswith("done:") and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    results[module] = said[len("done:"):] if ok else f"its import's process died ({{status}})"
print(json.dumps(results))
"""


def _all_modules() -> list[str]:
    import pkgutil

    import fitting

    return ["fitting"] + sorted(m.name for m in pkgutil.walk_packages(fitting.__path__, "fitting."))


@pytest.fixture(scope="module")
def heavy_imports() -> dict[str, str]:
    """Module name -> "" when importing it alone loaded no heavy package, else what went wrong
    ("imported jax,…", an import error, a process that died)."""
    code = _PROBE.format(heavy=HEAVY, modules=_all_modules())
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")  # no threads to fork
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=env)
    return json.loads(out.stdout)


def test_every_module_is_checked():
    # the list below is discovered, not hard-coded: a new module is checked automatically
    assert {"fitting.laws", "fitting.laws.budget.chinchilla", "fitting.laws.mixture.dpl", "fitting.cli",
            "fitting.report", "fitting.report.writer"} <= set(_all_modules())


@pytest.mark.parametrize("module", _all_modules())
def test_no_heavy_imports(module, heavy_imports):
    assert heavy_imports[module] == "", f"{module}: {heavy_imports[module]}"


def test_report_run_does_not_import_heavy_modules(tmp_path):
    code = f"""
import sys
from fitting.core.options import UncertaintyOptions
from fitting.test_utils import make_final_table
from fitting.report.writer import ReportOptions, write_report
write_report(make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.5, 1.0)), {str(tmp_path)!r},
             ReportOptions(uncertainty=UncertaintyOptions(n_refits=2)))
bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'tensorflow', 'mnmt', 'flax'))
print(','.join(bad))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", out.stdout
    assert (tmp_path / "report.md").exists()


@pytest.mark.parametrize("package", ["fitting", "fitting.core", "fitting.data", "fitting.laws",
                                     "fitting.plots", "fitting.report"])
def test_every_re_exported_name_resolves_to_its_definition(package):
    """Each name a package lists in ``__all__`` is the object its module defines (a typo in a
    re-export map would surface here, not in a user's session)."""
    import importlib

    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        home = getattr(value, "__module__", None)
        if home is not None and name != "__version__" and not isinstance(value, (dict, tuple)):
            assert home.startswith(package), f"{package}.{name} comes from {home}"


def test_an_unknown_name_is_an_attribute_error_naming_the_package():
    import fitting.laws

    with pytest.raises(AttributeError, match="'fitting.laws' has no attribute 'fit_nothing'"):
        fitting.laws.fit_nothing  # noqa: B018
