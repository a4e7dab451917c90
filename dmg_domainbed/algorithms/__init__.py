"""DomainBed algorithms of this package, one per module.

Each module holds one algorithm: its class, its hparams and everything else the package asks
of it (see :mod:`.base`); its pictures, when it draws any, sit next to it in
``<name>_pictures.py`` and are drawn through :mod:`dmg_domainbed.drawing` from plain data about
the run. Nothing here imports the reporting, preflight or command-line code: data flows from
them to the algorithms, never back. The algorithms are registered into DomainBed through the
``domainbed.algorithms`` entry-point group (see :mod:`dmg_domainbed.integration`), never by
importing this package.
"""
