"""The metrics schema (version 1, revision 1.1) of docs/reference/metrics_schema.md as constants.

The contract between the training stack, which writes run directories (``run.json`` and
``metrics.jsonl``), and :mod:`fitting`, which reads them (:mod:`fitting.data.rundirs`) and works on
the tidy table (:mod:`fitting.data.tables`).
"""

from __future__ import annotations

__all__ = ["SCHEMA_VERSION", "SCHEMA_REVISION", "RUN_JSON", "METRICS_JSONL", "METRICS_FIELDS",
           "TIDY_COLUMNS", "OPTIONAL_COLUMNS"]

#: stored in every run.json; bumped on an incompatible change only
SCHEMA_VERSION = 1
#: the document's revision: "1.1" added the optional tidy columns ``seed`` and ``mixture``
#: (compatible: tables and run directories without them still load)
SCHEMA_REVISION = "1.1"
RUN_JSON = "run.json"
METRICS_JSONL = "metrics.jsonl"

# Field -> accepted JSON types of one metrics.jsonl row, in the schema's order. ``value`` may
# also be null: a non-finite measurement (a diverged evaluation) is written as null.
METRICS_FIELDS: dict[str, tuple[type, ...]] = {
    "run_id": (str,),
    "step": (int,),
    "tokens": (int,),
    "task": (str,),
    "eval_set": (str,),
    "metric": (str,),
    "value": (int, float),
}

# Column -> pandas dtype kind of the tidy table ("The tidy table").
TIDY_COLUMNS: dict[str, str] = {
    "run_id": "str",
    "study": "str",
    "family": "str",
    "size": "str",
    "n": "int",
    "n_enc": "int",
    "n_dec": "int",
    "pair": "str",
    "weight": "float",
    "data_size": "float",
    "seed": "int",
    "mixture": "str",
    "eval_set": "str",
    "metric": "str",
    "step": "int",
    "tokens": "int",
    "value": "float",
    "final": "bool",
}

# Optional columns (revision 1.1) -> the value a table without them gets: ``seed`` of the run
# (``training.seed``), ``mixture`` the tag of how its weights were chosen (``extra.mixture``:
# "" for explicit weights, "T5" for temperature sampling, "os5" for oversampling).
OPTIONAL_COLUMNS: dict[str, object] = {"seed": float("nan"), "mixture": ""}
