"""Laws in the model size N (Fernandes et al. 2023; Ghorbani et al. 2021).

* :mod:`.power`      L(N) = β N^−α + L∞ per pair and weight (Fernandes eq. 1/3/6)
* :mod:`.joint`      the joint multilingual law, effective parameters (eq. 7, 9, 10)
* :mod:`.effective`  unseen weights through f̂(p) (eq. 11–13)
* :mod:`.frontier`   trade-off frontiers and recommended weights (§3.4)
* :mod:`.bivariate`  encoder/decoder law and optimal allocation (Ghorbani eq. 2–4)
"""
