"""Command launchers for DomainBed's sweep script, registered through the
``domainbed.command_launchers`` entry-point group: ``local_parallel`` (this machine) and
``submitit`` (Slurm). A launcher is DomainBed's plain ``launcher(commands)``; the sweep runner
asks it about its own jobs through attributes of that function, where it has them: ``OPTIONS``
(its settings: :mod:`.common`), ``check(environ)`` before any job folder exists, and
``running_jobs(output_dirs, environ)`` (folder -> state of its job while that still runs)
before it deletes incomplete job folders.
"""
