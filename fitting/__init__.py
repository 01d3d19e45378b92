"""fitting: the scaling laws of the four papers, fitted robustly to exported metrics.

Pure numpy/scipy/pandas/matplotlib: importing this package never imports jax, tensorflow or mnmt.
"""

__version__ = "0.1.0"
