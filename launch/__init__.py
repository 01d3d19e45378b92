"""launch: what starts a study on other machines — Cloud TPU VM slices and SLURM GPU clusters.

`remote` writes the scripts (every host runs `mnmt-study run-one` for its run; SLURM tasks
requeue themselves after a preemption); `cli` adds `mnmt-study launch`. Depends on `mnmt`;
`mnmt` never imports it. Studies themselves (spec, grid, local runner) live in `mnmt.study`.
"""
