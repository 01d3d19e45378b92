"""Laws of training curves: the loss of one run as a function of its step.

* :mod:`.learning_curve`  L(step) power law and its extrapolation (Fernandes App. G)
* :mod:`.schedule`        the learning-rate schedule's areas S1, S2 and the MPL sums
* :mod:`.runs`            curves (rates and losses of each run) read from a table
* :mod:`.joint_fit`       one fit over several runs, size terms, held-out errors
* :mod:`.annealing`       L(s) = L0 + A·S1^−α − C·S2 (Tissue et al. 2024, eq. 1)
* :mod:`.multipower`      the Multi-Power Law (Luo et al. 2025, eq. 1)
* :mod:`.branches`        cool-down branches' ends predicted from their parent's curve
* :mod:`.early_stop`      a stopped run's cooled-down end predicted from its curve up to the stop
"""

# The schedule-aware laws register themselves (``register_law``) when imported; the registry's
# lazy import of the built-in laws (fitting.core.base) loads this package through
# learning_curve, so loading them here lets ``FitResult.from_json`` rebuild them in a new process.
from fitting.laws.curves import annealing as annealing  # noqa: E402
from fitting.laws.curves import multipower as multipower  # noqa: E402
