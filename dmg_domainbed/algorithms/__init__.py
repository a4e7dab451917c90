"""DomainBed algorithms of this package, one folder per method.

Each folder holds everything one method uses and nothing else uses: the method's module, named
after it (its class, its hparams and everything else the package asks of it, see :mod:`.base`),
then its helpers (layers, networks, weights, pictures). Pictures are drawn through
:mod:`dmg_domainbed.drawing` from plain data about the run. What several methods share sits here,
beside :mod:`.base`: :mod:`.domains` (DMG, MultiHead) and :mod:`.named_layers` (DMG,
ImportanceMask).

* :mod:`.dmg`: DMG, its masks and their pictures;
* :mod:`.paper_baselines`: the DMG paper's Aggregate and Multi-Head baselines, the network, AlexNet
  and learning-rate schedules they share with DMG;
* :mod:`.corgrad`: CorGrad and its chunk arithmetic;
* :mod:`.importance_mask`: ImportanceMask and its pictures;
* :mod:`.sfmoe`: SF-MoE, its mixture-of-experts layer, network, weights and pictures.

A folder's ``__init__.py`` imports nothing, so its torch-only layers (DMG's masks, SF-MoE's
mixture of experts) import without DomainBed. Nothing here imports the reporting, preflight or
command-line code: data flows from them to the algorithms, never back. The algorithms are
registered into DomainBed through the ``domainbed.algorithms`` entry-point group (see
:mod:`dmg_domainbed.integration`), never by importing this package.
"""
