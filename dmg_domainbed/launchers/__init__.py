"""Command launchers for DomainBed's sweep script, registered through the
``domainbed.command_launchers`` entry-point group: ``local_parallel`` (this machine) and
``submitit`` (Slurm). Each is an instance of :class:`.common.Launcher`: DomainBed calls it as
``launcher(commands)``, and the sweep runner asks it its ``options``, ``check(environ)``
before any job folder exists and ``running_jobs(output_dirs, environ)`` before it deletes
incomplete job folders.
"""
