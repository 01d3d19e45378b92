"""Laws in the mixture weights.

* :mod:`.dpl`        the Double Power Law and optimal sampling ratios (Chen eq. 5–7)
* :mod:`.laws`       mixture laws for K pairs (Fernandes eq. 11 with transfer, Ye et al. 2024,
  Shukor et al. 2025) in the forms of :mod:`.forms`
* :mod:`.runs`       runs read from tables; :mod:`.domain` the losses outside their domain
* :mod:`.compare`    their comparison by held-out mixtures; :mod:`.transfer` the transfer matrix
* :mod:`.recommend`  weights at a target size against the baselines of :mod:`.baselines`
* :mod:`.fit`        the whole `mnmt-fit mixture` job
"""
