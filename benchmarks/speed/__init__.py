"""Speed benchmarks: time, throughput and memory of the training step, the input pipeline,
the token cache, the fitting engines and a study, each against a named competitor."""
