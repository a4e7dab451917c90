"""Command launchers for DomainBed's sweep script (``--command_launcher NAME``).

Registered into ``domainbed.command_launchers.REGISTRY`` through the
``domainbed.command_launchers`` entry-point group:

* ``local_parallel`` (:mod:`.local_parallel`): N jobs at once on this machine, one GPU each;
* ``submitit`` (:mod:`.submitit_launcher`): each job a Slurm array task, through submitit; it
  checks requests against the partition with :mod:`.slurm_partition` and waits for the jobs
  with :mod:`.slurm_wait`.

A launcher is DomainBed's plain ``launcher(commands)``. Ours also carry ``OPTIONS`` (their
settings, read from environment variables; see :mod:`.common`) and ``check(environ)``, which
``dmg-domainbed sweep`` calls before DomainBed creates any job folder.
"""
