"""Checks made before anything runs (``doctor``, ``sweep``, ``smoke``): will a DomainBed run start
on this machine? Nothing here downloads, creates or changes anything."""
