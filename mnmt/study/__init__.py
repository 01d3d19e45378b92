"""Studies: a grid of sizes x mixture weights x seeds, trained here and fitted (`mnmt-study`).

- ``spec``: `StudySpec` (gin), the built-in presets, grids and the expansion into runs;
- ``runner``: trains the runs one after another on this machine (resumable);
- ``progress``: the study's progress lines and ETA;
- ``stages``: loading a study, its output directory, the data stage, export + report;
- ``mesh_plan``: `plan --mesh`, each size's training step compiled for a (data, model) mesh on
  simulated CPU devices: per-device memory, FLOPs, a step-time bound;
- ``cli``: the `mnmt-study` entry point (run, plan, presets, prepare, run-one; `launch` is a
  plugin of the top-level `launch` package).
"""
