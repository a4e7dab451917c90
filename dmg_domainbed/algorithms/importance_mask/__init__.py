"""ImportanceMask: per-domain weight movement decides per-weight learning rates.

* :mod:`.importance_mask`: the algorithm, its two phases and the importance arithmetic;
* :mod:`.pictures`: what ``dmg-domainbed masks`` draws of a run's importance and masks.
"""
