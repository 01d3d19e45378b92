"""Laws in model size and token budget, L(N, D).

* :mod:`.chinchilla`        E + A/N^α + B/D^β (Caillaut eq. 2), its starts searched in
  :mod:`.chinchilla_search` and optimised in :mod:`.chinchilla_opt`
* :mod:`.chinchilla_joint`  the same form per pair, jointly across mixture weights
* :mod:`.kaplan_nd`         Kaplan et al.'s form, the alternative the joint fit chooses between
* :mod:`.data_constrained`  Muennighoff et al. 2023's L(N, D, U) for repeated data
* :mod:`.farseer`           Farseer's L(N, D), its floor and data terms smooth in N
"""
