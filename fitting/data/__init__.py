"""Metrics in and out: the schema of the contract with training, run directories, the tidy
table, local and remote paths, and mixture sampling weights from data sizes.

* :mod:`fitting.data.schema`   the metrics schema (version, file names, fields, tidy columns)
* :mod:`fitting.data.io`       local and remote (``://``) paths behind one API, atomic writes
* :mod:`fitting.data.rundirs`  run directories (``run.json`` + ``metrics.jsonl``) → rows, table
* :mod:`fitting.data.tables`   the tidy table: reading, writing, validation, final losses
* :mod:`fitting.data.seeds`    which runs are seeds of one experiment; seed spread and means
* :mod:`fitting.data.sampling` temperature and oversampling weights (Chen; Caillaut §3.1)
"""

from __future__ import annotations

from fitting.core.exports import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["SCHEMA_VERSION", "SCHEMA_REVISION", "RUN_JSON", "METRICS_JSONL",
                     "METRICS_FIELDS", "TIDY_COLUMNS", "OPTIONAL_COLUMNS"], "schema"),
    **dict.fromkeys(["read_metrics_jsonl", "read_run_dir", "collect_runs"], "rundirs"),
    **dict.fromkeys(["read_table", "write_table", "final_losses", "validate_tidy", "round_weights"],
                    "tables"),
    **dict.fromkeys(["temperature_weights", "oversampling_weights", "proportional_weights"],
                    "sampling"),
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
