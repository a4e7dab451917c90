"""``dmg-domainbed data check``: is a copy of a dataset what DomainBed reads, image by image?
:mod:`.data_check` is the entry point; each finding (:mod:`dmg_domainbed.datasets.findings`)
says what was found, what DomainBed expects and how to fix it."""
