"""Reports of DomainBed runs and sweeps. Every number comes from DomainBed's own files
(``results.jsonl``, ``model.pkl``) and, where DomainBed has the code (model selection, record
grouping, dataset splits), from that code, so the reports agree with ``collect_results`` and
``train.py`` to the digit. ``report`` and ``select`` never write into what they read;
``evaluate`` and ``masks`` write by default into a new sub-folder beside a run's files. A
number is flagged, never dropped, where the sweep is not done or a run diverged.

:mod:`.runs` (a run on disk), :mod:`.jobs` (a sweep's jobs), :mod:`.tables` (collect_results'
numbers, what each selection method selects, flags, files), :mod:`.comparisons` (paired
intervals), :mod:`.ranks` (ranks, Friedman test), :mod:`.report` (a sweep's report and
pictures), :mod:`.in_domain` (``evaluate``, ``select``), :mod:`.learned` (``masks``),
:mod:`.tensorboard`.
"""
