"""``dmg-domainbed data check``: is a copy of a dataset what DomainBed reads, image by image?

:mod:`.data_check` checks every dataset found under ``--data_dir``: DomainBed's image datasets
(:mod:`.folder_check`, :mod:`.image_findings`, :mod:`.decoding`), its MNIST and WILDS datasets
(:mod:`.mnist_check`, :mod:`.wilds_check`) and manifest datasets. Each finding
(:mod:`dmg_domainbed.datasets.findings`) says what was found, what DomainBed expects and the fix
(:mod:`.downloads`). Its quick mode (names, counts, file headers) is what the doctor and the sweep
preflight run.
"""
