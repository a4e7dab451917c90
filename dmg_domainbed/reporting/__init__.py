"""Reports of DomainBed runs and sweeps, one concept per module.

Every number comes from DomainBed's own files (``results.jsonl``, ``model.pkl``) and, where
DomainBed has the code (model selection, record grouping, dataset splits), from that code, so
the reports agree with ``domainbed.scripts.collect_results`` and ``train.py`` to the digit.
Nothing here writes into the folders it reads, and a number is flagged, never dropped, where
the sweep is not done or a run diverged.

* :mod:`.runs` -- a training run on disk: reading it, checking it, rebuilding its model,
  dataset and splits;
* :mod:`.record_fields` -- the fields of train.py's records each reader needs (foreign or
  older records are refused naming the field);
* :mod:`.jobs` -- a sweep's jobs as they stand: done, running, failed, diverged;
* :mod:`.divergence` -- whether a run's logged loss became NaN or infinite;
* :mod:`.cell_flags` -- which numbers of a report are partial or hold a diverged run;
* :mod:`.tables` -- collect_results' numbers as DataFrames and Markdown;
* :mod:`.selected` -- the run, hparams and checkpoint each selection method selects;
* :mod:`.comparisons` -- every algorithm paired with a reference, with confidence intervals;
* :mod:`.ranks` -- average ranks across tasks, Friedman test, critical-difference diagram;
* :mod:`.tensorboard` -- a sweep's runs, hparams and selections as TensorBoard logs;
* :mod:`.pictures` -- the sweep's accuracy picture (drawn with :mod:`dmg_domainbed.drawing`);
* :mod:`.files` -- writing CSV and Markdown files into a safe output folder;
* :mod:`.in_domain` -- in-domain evaluation of finished runs (paper Table 3);
* :mod:`.learned` -- pictures of what a finished run learned, drawn by its algorithm
  (``draw_learned``, see :mod:`dmg_domainbed.algorithms.base`) from plain data built here;
* :mod:`.report` -- a sweep's report.
"""
