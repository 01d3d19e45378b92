"""Fixtures shared by every test folder."""

import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="session")
def benchmark_script():
    """`benchmark_script("train_step")`: a script of benchmarks/ imported as a module (they are
    scripts run by path, not a package); each is loaded once per session."""
    loaded = {}

    def load(name: str):
        if name not in loaded:
            spec = importlib.util.spec_from_file_location(f"benchmark_{name}",
                                                          BENCHMARKS / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            loaded[name] = module
        return loaded[name]

    return load
