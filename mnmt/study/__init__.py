"""Studies: a grid of sizes x mixture weights x seeds, trained here and fitted (`mnmt-study`).

- ``spec``: `StudySpec` (gin), the built-in presets, grids and the expansion into runs;
- ``runner``: trains the runs one after another on this machine (resumable);
- ``progress``: the study's progress lines and ETA;
- ``loading``: a study from a preset or a study file, with `--gin` overrides;
- ``data_stage``: vocabulary, tasks, token caches and the exact irreducible loss of a study;
- ``stages``: the stages chained: output directory, export + report (re-exports the two above);
- ``mesh_plan``: `plan --mesh`, each size's training step compiled for a (data, model) mesh on
  simulated CPU devices: per-device memory, FLOPs, a step-time bound;
- ``cli``: the `mnmt-study` entry point (run, plan, presets, prepare, run-one; `launch` is a
  plugin of the top-level `launch` package).
"""
