"""DMG: Domain-specific Masks for Generalization (Chattopadhyay, Balaji, Hoffman, ECCV 2020).

* :mod:`.dmg`: the algorithm (the paper's Aggregate network with a mask per source domain);
* :mod:`.masks`: the masks on a network's activations and the losses of Eq. 2-3, in plain torch;
* :mod:`.pictures`: what ``dmg-domainbed masks`` and the reports draw of a run's masks.
"""
