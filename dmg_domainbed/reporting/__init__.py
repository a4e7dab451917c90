"""Reports of DomainBed runs and sweeps, from DomainBed's own files and, where DomainBed has the
code (model selection, grouping, splits), from that code, so they agree with ``collect_results``
and ``train.py`` to the digit. A number is flagged, never dropped, where the sweep is not done
or a run diverged. docs/reports.md describes every command.
"""
