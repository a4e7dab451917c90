"""DomainBed's sweep for one group of a planned sweep, in a process of its own.

``python -m dmg_domainbed.sweep.launch SPEC`` does what ``python -m domainbed.scripts.sweep``
does, with DomainBed's own ``Job.launch`` (job folders, then the command launcher) or
``Job.delete``: ``launch`` starts the group's jobs that have no folder yet, ``delete_incomplete``
removes the folders of jobs that have no ``done`` file. SPEC is the JSON that
:func:`dmg_domainbed.sweep.plan.launch_command` writes. A process of its own, like DomainBed's
sweep script, keeps the launcher (which may fork its jobs) apart from the command that called it.
"""

from __future__ import annotations

import json
import sys

from dmg_domainbed.errors import UserError
from dmg_domainbed.sweep import plan


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    sweep = plan.Sweep.from_json(json.dumps(spec["sweep"]))
    group = sweep.groups[spec["group"]]
    from domainbed import command_launchers
    from domainbed.scripts.sweep import Job

    jobs = plan.jobs(sweep, group)
    if spec["action"] == "delete_incomplete":
        incomplete = [job for job in jobs if job.state == Job.INCOMPLETE]
        if incomplete:
            Job.delete(incomplete)
        return 0
    to_launch = [job for job in jobs if job.state == Job.NOT_LAUNCHED]
    print(
        f"{len(jobs)} jobs of {', '.join(group.algorithms)}: {len(to_launch)} to launch", flush=True
    )
    if to_launch:
        try:
            Job.launch(to_launch, command_launchers.REGISTRY[spec["launcher"]])
        except UserError as error:
            print(f"dmg-domainbed: error: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
