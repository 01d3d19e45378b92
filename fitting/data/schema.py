"""The metrics schema (version 1, revision 1.4) of docs/reference/metrics_schema.md as constants.

The contract between the training stack, which writes run directories (``run.json`` and
``metrics.jsonl``), and :mod:`fitting`, which reads them (:mod:`fitting.data.rundirs`) and works on
the tidy table (:mod:`fitting.data.tables`).
"""

from __future__ import annotations

__all__ = ["SCHEMA_VERSION", "SCHEMA_REVISION", "RUN_JSON", "METRICS_JSONL", "METRICS_FIELDS",
           "TIDY_COLUMNS", "OPTIONAL_COLUMNS", "BRANCH_FIELD", "RECOMMENDED", "PROBE_METRIC"]

#: stored in every run.json; bumped on an incompatible change only
SCHEMA_VERSION = 1
#: the document's revision: "1.1" added the optional tidy columns ``seed`` and ``mixture``,
#: "1.2" the optional ``run.json`` object ``branch`` (cool-down branches) and the tidy columns
#: ``parent_run`` and ``branch_step``, "1.3" per-pair ``train_loss`` rows beside task ``all``,
#: and ``train_loss`` redefined as the per-target-token cross-entropy without label smoothing or
#: z-loss, token-weighted over the log window (``all`` was the mean of the steps' objectives),
#: "1.4" ``probe_loss`` rows (:data:`PROBE_METRIC`).
#: Compatible: tables and run directories of older revisions still load as they are (no reader
#: decides anything by the revision, which no run records).
SCHEMA_REVISION = "1.4"
RUN_JSON = "run.json"
#: the optional ``run.json`` object of a cool-down branch (revision 1.2):
#: ``{"parent": run_id, "step": b, "cooldown_steps": int}``; absent or null for an ordinary run
BRANCH_FIELD = "branch"
METRICS_JSONL = "metrics.jsonl"
#: the metric of probe evaluations (revision 1.4): a pair's ``loss`` (per target token, no label
#: smoothing, no z-loss) on its fixed probe set — the first examples of its first eval set, the
#: same at every probe step — every ``EvalConfig.probe_every`` steps and at the last step; task
#: the pair, eval set the set the examples come from. The model after ``step`` updates, like
#: ``loss``, on fewer examples; the curve laws prefer it to ``train_loss`` where a table has it.
PROBE_METRIC = "probe_loss"
#: the name of the recommended mixture among a verification's mixtures: the plan that
#: ``mnmt.study.verify`` makes and ``fitting.report.sections.verification`` reads (its runs are tagged
#: ``verify-recommended``); here, not in the report, so that ``mnmt-study`` imports no pandas
RECOMMENDED = "recommended"

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
    "parent_run": "str",
    "branch_step": "int",
    "eval_set": "str",
    "metric": "str",
    "step": "int",
    "tokens": "int",
    "value": "float",
    "final": "bool",
}

# Optional columns -> the value a table without them gets. Revision 1.1: ``seed`` of the run
# (``training.seed``), ``mixture`` the tag of how its weights were chosen (``extra.mixture``:
# "" for explicit weights, "T5" for temperature sampling, "os5" for oversampling). Revision 1.2:
# ``parent_run`` (``branch.parent``: the run a cool-down branch resumed from, "" for an ordinary
# run) and ``branch_step`` (``branch.step``: the parent's step it left from, NaN for an ordinary
# run).
OPTIONAL_COLUMNS: dict[str, object] = {"seed": float("nan"), "mixture": "",
                                       "parent_run": "", "branch_step": float("nan")}
