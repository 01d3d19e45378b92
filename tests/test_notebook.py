"""Integration: docs/notebooks/analysis.ipynb runs top to bottom on the `ci` study's output.

The notebook is executed with nbclient on the `python3` kernel of this interpreter's ipykernel,
with ``MNMT_STUDY_DIR`` pointing at the study that tests/conftest.py's `ci_study` runs once per
session. ``MNMT_NOTEBOOK_REFITS`` lowers the perturbation refits from 100 to 20 to keep it quick.
"""

import math
import re
import struct
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from fitting.test_utils import TRUTH
from mnmt.study.spec import PRESETS

pytestmark = pytest.mark.integration

NOTEBOOK = Path(__file__).resolve().parent.parent / "docs" / "notebooks" / "analysis.ipynb"
JOINT_LINE = re.compile(r"^joint law (\S+): alpha = (\S+) ± \S+, L∞ = (\S+) ", re.M)
#: figures the synthetic cells draw (every step runs there); study cells draw at least one
SYNTHETIC_FIGURES = {"synthetic-plot": 5, "synthetic-eq11": 2}


def stdout(cell) -> str:
    return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")


def png_sizes(cell) -> list[tuple[int, int]]:
    """(width, height) of each image/png output, read from the PNG header."""
    import base64

    sizes = []
    for o in cell.outputs:
        if "data" in o and "image/png" in o.data:
            raw = base64.b64decode(o.data["image/png"])
            assert raw[:8] == b"\x89PNG\r\n\x1a\n", f"cell {cell.id}: not a PNG"
            sizes.append(struct.unpack(">II", raw[16:24]))
    return sizes


def test_the_stored_notebook_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, cell.id


def test_analysis_notebook_runs_on_the_ci_study(ci_study, tmp_path, monkeypatch):
    out, _ = ci_study
    monkeypatch.setenv("MNMT_STUDY_DIR", str(out))
    monkeypatch.setenv("MNMT_NOTEBOOK_REFITS", "20")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the kernel must be this interpreter's (the venv's), not another Python on the machine
    nb.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.prefix)", id="kernel-check"))
    NotebookClient(nb, kernel_name="python3", timeout=300,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()  # raises on error
    cells = {c.id: c for c in nb.cells if c.cell_type == "code"}
    assert stdout(cells["kernel-check"]).strip() == sys.prefix

    # the study's joint law (eq. 7): a finite α and L∞ per pair, printed next to the exact L∞
    pairs = set(PRESETS["ci"].pairs)
    joint = {m[0]: (float(m[1]), float(m[2])) for m in JOINT_LINE.findall(stdout(cells["joint"]))}
    assert set(joint) == pairs, stdout(cells["joint"])
    assert all(math.isfinite(a) and math.isfinite(li) for a, li in joint.values()), joint
    assert stdout(cells["joint"]).count("true L∞ = ") == len(pairs)
    if len(PRESETS["ci"].weights) == 1:  # steps that need several weights say why they skip
        assert "f(p) (eq. 10) skipped: no runs with p = 1" in stdout(cells["fraction"])
        assert "eq. 11 skipped: it needs at least 2 positive weights" in stdout(cells["eq11"])
        assert "frontier and recommendation skipped" in stdout(cells["eq11"])

    # a figure from every plotting cell, all of them drawn
    tagged = [c for c in nb.cells if "figure" in c.metadata.get("tags", [])]
    assert {"power-plot", "joint-plot", *SYNTHETIC_FIGURES} <= {c.id for c in tagged}
    for cell in tagged:
        sizes = png_sizes(cell)
        assert len(sizes) >= SYNTHETIC_FIGURES.get(cell.id, 1), (cell.id, sizes)
        assert all(w >= 200 and h >= 200 for w, h in sizes), (cell.id, sizes)

    # the synthetic section recovers the known truth
    syn = {m[0]: (float(m[1]), float(m[2])) for m in JOINT_LINE.findall(stdout(cells["synthetic"]))}
    assert set(syn) == set(TRUTH)
    for pair, (alpha, l_inf) in syn.items():
        true_alpha, _, true_l_inf, _ = TRUTH[pair]
        assert l_inf == pytest.approx(true_l_inf, rel=0.03), (pair, l_inf)
        assert alpha == pytest.approx(true_alpha, rel=0.05), (pair, alpha)
    rec = re.search(r"recommended weights at N = \S+: (\S+) (\S+), (\S+) (\S+)",
                    stdout(cells["synthetic-eq11"]))
    assert rec, stdout(cells["synthetic-eq11"])
    weights = {rec[1]: float(rec[2]), rec[3]: float(rec[4])}
    assert set(weights) == set(TRUTH) and sum(weights.values()) == pytest.approx(1, abs=2e-3)
    assert all(0 < w < 1 for w in weights.values()), weights
