"""Measurements of the project, never run by the test suite; each script is run by path
(`python benchmarks/ROOM/NAME.py`, from the repository root) and records its numbers in
benchmarks/RESULTS.md.

Rooms:
- `speed/`: time, throughput and memory against named competitors (training step, input
  pipeline, token cache, fitting engines, study throughput);
- `validation/`: `fitting` against ground truth and published results and tables;
- `studies/`: study runs and the checks read from them (the main job's checks, seeds, kill
  trials, curve laws, early stop, fewer branches).
`common.py` holds what the scripts share (the repository's paths, the machine description);
`data/` the vendored public data.
"""
