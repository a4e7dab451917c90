"""A job that ends with exit 0 after its loss became NaN or infinite is not called "ok" in the
local_parallel launcher's summary of the jobs."""

import shlex
import sys

from dmg_domainbed.launchers import local_parallel

# What train.py leaves when training diverged: records whose loss is NaN, then exit 0.
DIVERGING = (
    "import json, pathlib, sys; out = pathlib.Path(sys.argv[2]); "
    "out.joinpath('results.jsonl').write_text("
    "json.dumps({'step': 0, 'loss': 2.3}) + '\\n' + "
    "json.dumps({'step': 300, 'loss': float(sys.argv[3])}) + '\\n')"
)


def test_a_job_whose_loss_diverged_is_reported_diverged_not_ok(tmp_path):
    plan = local_parallel.Plan(jobs=2, gpus=(), threads=1, loader_workers=1, warm=False)
    jobs = {value: tmp_path / value for value in ("nan", "inf", "0.5")}
    for folder in jobs.values():
        folder.mkdir()
    commands = [
        f"{shlex.quote(sys.executable)} -c {shlex.quote(DIVERGING)} --output_dir {folder} {value}"
        for value, folder in jobs.items()
    ]
    said = []
    outcomes = local_parallel.run_commands(commands, plan, say=said.append)
    assert [outcome.returncode for outcome in outcomes] == [0, 0, 0]
    lines = {line.rsplit(": ", 1)[1]: line for line in said}
    assert "DIVERGED (loss nan at step 300; new process" in lines[str(jobs["nan"])]
    assert "DIVERGED (loss inf at step 300; new process" in lines[str(jobs["inf"])]
    assert "] ok (new process" in lines[str(jobs["0.5"])]
