"""ImportanceMask: per-domain weight movement decides per-weight learning rates.

* :mod:`.importance_mask`: the algorithm, its two phases and the importance arithmetic;
* :mod:`.grouped`: phase 1's copies run as one network of channel groups;
* :mod:`.pictures`: what ``dmg-domainbed masks`` draws of a run's importance and masks.
"""
