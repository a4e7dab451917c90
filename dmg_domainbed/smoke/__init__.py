"""``dmg-domainbed smoke``: every algorithm and dataset of a sweep a few steps through DomainBed's
own ``train`` (:mod:`.jobs`: which jobs, on what data and weights; :mod:`.run`: run, measure,
report), before the sweep is launched."""
