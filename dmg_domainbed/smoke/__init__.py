"""``dmg-domainbed smoke``: run every algorithm and dataset of a sweep a few steps through
DomainBed's own ``train`` before launching the sweep.

:mod:`.jobs` picks the jobs (for each algorithm and dataset, the sweep's job with the largest
batch), :mod:`.staging` puts their data and weights in a temporary folder (a small sample of the
real dataset, or synthetic stand-ins when asked), :mod:`.run` runs each one as a fresh
``python -m domainbed.scripts.train`` process, measures it and prints the result
and what the sweep will cost. Nothing is written into the sweep's output folder.
"""
