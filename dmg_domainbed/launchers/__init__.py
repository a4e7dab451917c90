"""DomainBed command launchers, registered through the ``domainbed.command_launchers``
entry-point group: ``local_parallel`` (this machine) and ``submitit`` (Slurm)."""
