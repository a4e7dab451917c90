"""SF-MoE: Sparse Fusion Mixture-of-Experts (Li et al., arXiv 2206.04046v1).

* :mod:`.sfmoe`: the algorithm (loss, optimiser, what it logs and declares);
* :mod:`.moe`: the sparse top-2 mixture-of-experts layer, in plain torch;
* :mod:`.network`: timm's distilled DeiT-Small with that layer in place of some MLPs;
* :mod:`.weights`: where the pretrained DeiT-S weights are found, and whether a file fits;
* :mod:`.pictures`: what ``dmg-domainbed masks`` draws of a run's routing and attention.
"""
