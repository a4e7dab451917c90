"""Run DomainBed's own train script several times in one process: ``python train_worker.py
JOBS.json``, a JSON list of train argument lists, run one after the other.

Each run executes ``domainbed.scripts.train`` unmodified as ``__main__`` (what ``python -m``
does), so a worker pays the 7-10 s of imports once instead of once per run. A run that fails
leaves its traceback in ``<output_dir>/worker_error.txt`` and the next run goes on.
"""

import json
import runpy
import sys
import time
import traceback
from pathlib import Path


def main(jobs_file: str) -> None:
    import dmg_domainbed

    dmg_domainbed.register()
    from domainbed import datasets

    # DomainBed loads images with 8 worker processes per data loader, and a run has one loader
    # per domain and split: for a few tiny images, loading them in the process itself is much
    # faster. The smoke check's test runs train.py in a fresh process with DomainBed's 8.
    # Registration gives every dataset class its own N_WORKERS, so each is set.
    classes = [datasets.MultipleDomainDataset]
    for cls in classes:
        cls.N_WORKERS = 0
        classes += cls.__subclasses__()
    stdout, stderr = sys.stdout, sys.stderr
    for args in json.loads(Path(jobs_file).read_text()):
        output = Path(args[args.index("--output_dir") + 1])
        sys.argv = ["train.py", *args]
        start = time.monotonic()
        try:
            runpy.run_module("domainbed.scripts.train", run_name="__main__", alter_sys=True)
        except (Exception, SystemExit):
            output.mkdir(parents=True, exist_ok=True)
            (output / "worker_error.txt").write_text(traceback.format_exc())
        finally:
            # train.py replaces both with copies into its output folder.
            sys.stdout, sys.stderr = stdout, stderr
            print(f"{output.name}: {time.monotonic() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
