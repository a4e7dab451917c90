"""Sweep progress lines come from DomainBed's ``done`` files as jobs finish."""

import time
from types import SimpleNamespace

from dmg_domainbed.sweep.progress import watch_done


def job(tmp_path, name, test_env):
    folder = tmp_path / f"{name}_{test_env}"
    folder.mkdir()
    return SimpleNamespace(output_dir=str(folder), name=f"{name}, test domain {test_env * 30}")


def test_reports_each_job_once_when_its_done_file_appears(tmp_path):
    finished_before = job(tmp_path, "ERM", 0)
    (tmp_path / "ERM_0" / "done").write_text("done")
    first, second = job(tmp_path, "DMG", 1), job(tmp_path, "DMG", 2)
    lines = []
    jobs = [finished_before, first, second]
    with watch_done(jobs, lines.append, lambda j: j.name, interval=0.01):
        (tmp_path / "DMG_2" / "done").write_text("done")
        deadline = time.monotonic() + 10
        while not lines and time.monotonic() < deadline:
            time.sleep(0.01)
        (tmp_path / "DMG_1" / "done").write_text("done")
    assert [line.split(" (")[0] for line in lines] == [
        "[2/3] done: DMG, test domain 60",
        "[3/3] done: DMG, test domain 30",
    ]
