"""Laws of training curves: the loss of one run as a function of its step.

* :mod:`.learning_curve`  L(step) power law and its extrapolation (Fernandes App. G)
"""
