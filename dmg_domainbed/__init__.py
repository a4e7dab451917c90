"""Domain-generalization algorithms as plugins of facebookresearch/DomainBed: DMG with its
multi-head and aggregate baselines, CorGrad, ImportanceMask and SFMOE.

Installing the package is enough: a start-up hook registers the plugins into DomainBed's
modules the moment DomainBed imports them. Where site-packages hooks do not run (embedded
interpreters, ``python -S``), call :func:`register` once before using DomainBed.

This module is imported at every interpreter start-up, so it must stay stdlib-only and cheap.
"""

__version__ = "0.1.0"
#: The DomainBed commit this package is built and tested against.
TESTED_DOMAINBED_COMMIT = "b93c22a1cfc3b2428398272c1a116c8de1f4139e"


def register() -> None:
    """Import DomainBed's library modules and register every plugin into them.

    Idempotent: a second call changes nothing.
    """
    from dmg_domainbed import integration

    integration.register_all()
