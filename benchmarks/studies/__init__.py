"""Study benchmarks: study runs (the main job on several seeds, kill trials, miniature
experiments) and the checks and analyses read from finished studies."""
