"""``dmg-domainbed smoke``: every algorithm and dataset of a sweep a few steps through DomainBed's
own ``train`` before the sweep is launched. :mod:`.jobs` picks the jobs and gives them data and
weights in a temporary folder; :mod:`.run` runs each as a fresh process, measures and reports
it. Nothing is written into the sweep's output folder."""
