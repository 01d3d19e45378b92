"""mnmt: the JAX/Flax/SeqIO training stack of mnmt-scaling.

Importing `mnmt` is cheap: submodules import JAX, Flax, TensorFlow and SeqIO only when used.
"""

__version__ = "0.1.0"
