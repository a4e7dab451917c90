"""Command launchers for DomainBed's sweep script (``--command_launcher NAME``), registered into
``domainbed.command_launchers.REGISTRY`` through the ``domainbed.command_launchers`` entry-point
group: ``local_parallel`` (:mod:`.local_parallel`, N jobs at once on this machine) and
``submitit`` (:mod:`.submitit_launcher`, Slurm).

A launcher is DomainBed's plain ``launcher(commands)``. The sweep runner asks it about its own
jobs through attributes of that function, where it has them: ``OPTIONS`` (its settings, read
from environment variables: :mod:`.common`), ``check(environ)`` before any job folder exists,
and ``running_jobs(output_dirs, environ)`` (folder -> state of the jobs that still run) before
it deletes incomplete job folders.
"""
