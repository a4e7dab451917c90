"""The DMG paper's baselines, Aggregate and Multi-Head, and what DMG builds on with them.

* :mod:`.aggregate`: Aggregate*, one network on the pooled sources (DMG without masks);
* :mod:`.multihead`: Multi-Head, a shared featurizer and one head per source domain;
* :mod:`.paper`: the hparams, network and learning-rate schedulers of the paper's three
  algorithms (Aggregate, Multi-Head, DMG);
* :mod:`.alexnet`: torchvision's ImageNet AlexNet as a featurizer, the paper's first backbone;
* :mod:`.schedules`: the authors' learning-rate schedules, as factors of the base rate.
"""
