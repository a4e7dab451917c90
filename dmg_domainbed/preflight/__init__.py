"""Checks made before anything runs: will a DomainBed run start on this machine?

``dmg-domainbed doctor``, ``dmg-domainbed sweep`` and ``dmg-domainbed smoke`` use them. Nothing
here downloads, creates or changes anything: folders and caches are only looked at.
"""
