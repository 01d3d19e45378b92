"""Validation benchmarks: `fitting` on data generated from known laws, and against published
fits, tables and curves (benchmarks/data/ and ../shared/data)."""
