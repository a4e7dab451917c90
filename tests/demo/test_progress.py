"""The demo's progress lines come from DomainBed's ``done`` files as jobs finish."""

import time

from dmg_domainbed.demo.plan import Job
from dmg_domainbed.demo.progress import DoneWatcher


def job(tmp_path, name, test_env):
    folder = tmp_path / f"{name}_{test_env}"
    folder.mkdir()
    return Job(folder, name, test_env, str(test_env * 30))


def test_reports_each_job_once_when_its_done_file_appears(tmp_path):
    finished_before = job(tmp_path, "ERM", 0)
    (finished_before.output_dir / "done").write_text("done")
    first, second = job(tmp_path, "DMG", 1), job(tmp_path, "DMG", 2)
    lines = []
    with DoneWatcher([finished_before, first, second], lines.append, interval=0.01):
        (second.output_dir / "done").write_text("done")
        deadline = time.monotonic() + 10
        while not lines and time.monotonic() < deadline:
            time.sleep(0.01)
        (first.output_dir / "done").write_text("done")
    assert [line.split(" (")[0] for line in lines] == [
        "[2/3] done: DMG, test domain 60",
        "[3/3] done: DMG, test domain 30",
    ]
