"""``benchmarks/gpu_proof.py``, the one command that proves the package on a GPU: its tiny mode
runs end to end here, into one results file from which the docs' GPU tables are rendered; a part
that fails or runs out of time does not stop the next. Figures are not judged here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import psutil
import pytest
import torch

from tests.helpers import load_script, run_python

ROOT = Path(__file__).resolve().parents[1]
CUDA_ONLY = ("lane_algorithms", "lane_launchers", "sfmoe_cost")
OUTCOMES = ("passed", "skipped")  # of every part of a tiny run


@pytest.fixture
def proof(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # the benchmarks the parts import
    return load_script(ROOT / "benchmarks" / "gpu_proof.py", monkeypatch)


@pytest.fixture
def generate(monkeypatch):
    return load_script(ROOT / "docs" / "generate.py", monkeypatch)


@pytest.mark.slow
def test_tiny_mode_runs_every_part_into_one_results_file(proof, generate, tmp_path):
    # The command as a user starts it: its parts are forked from it, and a part that launches
    # warm jobs starts its own fork server (one forked from a test process would find the
    # test process's, which is not its child).
    output = tmp_path / "out"
    script = str(ROOT / "benchmarks" / "gpu_proof.py")
    finished = run_python(
        script, "--output_dir", str(output), "--tiny", env=dict(os.environ), check=False
    )
    code, printed = finished.returncode, finished.stdout

    assert sorted(os.listdir(output)) == ["gpu_proof.json", "logs.tar.gz"]
    results = json.loads((output / "gpu_proof.json").read_text())
    parts = results["parts"]
    assert list(parts) == [part.name for part in proof.PARTS]
    failed = {name: part for name, part in parts.items() if part["status"] not in OUTCOMES}
    assert not failed, failed
    assert code == 0
    for name in ("environment", "step_time", "accuracy", "job_start"):
        assert parts[name]["status"] == "passed", parts[name]
    if not torch.cuda.is_available():
        for name in CUDA_ONLY:
            assert parts[name]["status"] == "skipped", parts[name]
            assert "no CUDA device here" in parts[name]["reason"]
    assert results["mode"] == "tiny" and results["torch"] == torch.__version__
    assert results["commit"] and results["date"] and results["seconds"] > 0

    timed = parts["step_time"]["figures"]
    assert [row["algorithm"] for row in timed["rows"]] == ["ERM", "DMG", "CorGrad"]
    assert [row["algorithm"] for row in timed["bf16"]] == ["ERM", "DMG", "CorGrad"]
    assert timed["rows"][2]["step_floor_ratio"] > 0 and timed["bf16"][2]["step_speedup"] > 0
    paired = parts["accuracy"]["figures"]["algorithms"]
    assert set(paired) == {"ERM", "DMG"}
    for found in paired.values():
        assert found["pairs"] == 2 and 0 <= found["fp32"] <= 100 and 0 <= found["bf16"] <= 100
        assert found["ci_low"] <= found["difference"] <= found["ci_high"]

    # Jobs per GPU (on the CPU without one): each wave's jobs, their wall time in phases, and
    # the jobs_per_gpu the waves recommend.
    packed = parts["job_start"]["figures"]
    waves = packed["waves"]
    assert [(w["precision"], w["jobs_per_gpu"]) for w in waves] == [
        ("fp32", 1),
        ("bf16", 1),
        ("fp32", 2),
        ("bf16", 2),
    ]
    for wave in waves:
        assert list(wave["phases"]) == list(proof.PHASES)
        assert all(seconds >= 0 for seconds in wave["phases"].values())
        assert 0 < sum(wave["phases"].values()) <= wave["wall"]  # a job within its wave
        assert wave["phases"]["first_step"] > 0 and wave["phases"]["evaluation"] > 0
    assert set(packed["recommended"]) == {"fp32", "bf16"}
    assert set(packed["recommended"].values()) <= {1, 2}

    with tarfile.open(output / "logs.tar.gz") as archive:
        names = set(archive.getnames())
    assert {f"logs/{part.name}.log" for part in proof.PARTS} <= names
    assert {"logs/step_time.csv", "logs/step_time_bf16.csv"} <= names
    assert sum(name.endswith(".jsonl") for name in names) == 8  # every run's records

    # The docs' tables come from the results file, and the command printed them.
    step_table = proof.markdown(results, "step_time")
    assert "| CorGrad" in step_table and step_table in printed
    assert "| step_time " in proof.markdown(results, "status")
    assert "| ERM " in proof.markdown(results, "accuracy")
    assert "Recommended `jobs_per_gpu`" in proof.markdown(results, "job_start")
    assert proof.markdown(results, "job_phases").count("| ERM ") == 4
    # ... but a tiny run's figures are not measurements: the docs refuse them.
    with pytest.raises(SystemExit, match="tiny run"):
        generate.gpu_table("status", output / "gpu_proof.json")
    # Nothing already written is overwritten.
    with pytest.raises(SystemExit):
        proof.main(["--output_dir", str(output), "--tiny", "--parts", "environment"])
    assert json.loads((output / "gpu_proof.json").read_text()) == results


def test_without_a_results_file_every_gpu_table_says_unmeasured_with_the_command(generate):
    for table in ("status", "step_time", "sfmoe_cost", "job_start", "job_phases", "accuracy"):
        text = generate.gpu_table(table, ROOT / "docs" / "no_such_results.json")
        assert "unmeasured" in text
    assert "benchmarks/gpu_proof.py" in generate.gpu_table("step_time", Path("/nonexistent"))


def hangs_with_a_child(settings):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    (settings.scratch / "child").write_text(str(child.pid))
    print("half done", flush=True)
    time.sleep(120)


def fails(settings):
    raise ValueError("broken on purpose")


def measures(settings):
    print("measuring")
    return {"value": 1.5, "none": float("nan")}


@pytest.mark.parametrize("budget", ["nan", "inf", "0", "-60"])
def test_a_budget_that_is_not_a_finite_positive_time_is_refused(proof, budget, tmp_path, capsys):
    ran = []
    proof.run = ran.append
    with pytest.raises(SystemExit) as refused:
        proof.main(["--output_dir", str(tmp_path / "out"), "--tiny", "--budget_s", budget])
    assert refused.value.code == 2 and ran == [] and not (tmp_path / "out").exists()
    message = capsys.readouterr().err
    assert f"--budget_s must be a finite number of seconds > 0; got {budget}" in message


def test_an_output_folder_it_cannot_write_to_is_refused_before_any_part_runs(
    proof, tmp_path, capsys
):
    from tests.helpers import read_only

    ran = []
    proof.run = ran.append
    for output in (tmp_path / "read_only", tmp_path / "read_only" / "new"):
        with read_only(tmp_path / "read_only"), pytest.raises(SystemExit) as refused:
            proof.main(["--output_dir", str(output), "--tiny"])
        assert refused.value.code == 2 and ran == []
        message = capsys.readouterr().err
        assert f"cannot write into --output_dir {output} (" in message
        assert "nothing was run" in message


def test_a_part_that_fails_or_runs_out_of_time_does_not_stop_the_next(proof, tmp_path):
    settings = proof.Settings(False, tmp_path, tmp_path / "logs")
    settings.logs.mkdir()
    deadline = time.monotonic() + 120
    outcomes = {}
    for part in (
        proof.Part("fails", "raises", fails, 60),
        proof.Part(
            "hangs", "sleeps past its limit", hangs_with_a_child, 3, lambda log: {"log": log}
        ),
        proof.Part("measures", "returns figures", measures, 60),
    ):
        outcomes.update(proof.run_stage([part], settings, deadline, scale=1.0))

    assert outcomes["fails"]["status"] == "failed"
    assert outcomes["fails"]["reason"] == "ValueError: broken on purpose"
    assert "Traceback" in (settings.logs / "fails.log").read_text()
    assert outcomes["hangs"]["status"] == "timed out"
    assert outcomes["hangs"]["figures"] == {"log": "half done\n"}  # what its log told
    assert not psutil.pid_exists(int((tmp_path / "child").read_text()))  # ended with its part
    assert outcomes["measures"]["status"] == "passed"
    assert outcomes["measures"]["figures"] == {"value": 1.5, "none": None}  # strict JSON
    assert (settings.logs / "measures.log").read_text() == "measuring\n"

    spent = proof.run_stage([proof.Part("late", "", measures, 60)], settings, time.monotonic(), 1)
    assert spent["late"]["status"] == "not run"


def test_a_lane_ended_for_time_reports_the_outcomes_pytest_printed(proof):
    """``pytest -v``'s lines in one process and in pytest-xdist's workers."""
    log = (
        "8 workers [5 items]\n"
        "tests/gpu/test_gpu_bf16.py::test_a[ERM] PASSED [ 33%]\n"
        "tests/gpu/test_gpu_bf16.py::test_a[DMG] FAILED [ 66%]\n"
        "[gw0] [ 80%] SKIPPED tests/gpu/test_gpu_bf16.py::test_b@tests/gpu/test_gpu_bf16.py \n"
        "[gw1] [ 90%] PASSED tests/gpu/test_gpu_algorithms.py::test_c[SFMOE]@group \n"
        "SKIPPED [1] tests/gpu/test_gpu_bf16.py:63: needs a CUDA GPU\n"
    )
    found = proof.lane_progress(log)
    assert (found["tests"], found["collected"], found["passed"]) == (4, 5, 2)
    assert proof.lane_progress("collected 3 items\n")["collected"] == 3
    assert [f["test"] for f in found["failed"]] == ["tests/gpu/test_gpu_bf16.py::test_a[DMG]"]
    assert [s["test"] for s in found["skipped"]] == ["tests/gpu/test_gpu_bf16.py::test_b"]


def test_the_jobs_per_gpu_table_shows_each_waves_step_0_and_wall_time(proof, monkeypatch):
    """What a job spends outside its steps: step 0 and the wave's wall time, beside images/s."""
    from dataclasses import asdict

    job_start = load_script(ROOT / "benchmarks" / "job_start.py", monkeypatch)
    waves = [
        {
            "algorithm": "ERM",
            "precision": precision,
            "jobs_per_gpu": 1,
            "gpus": 1,
            "images_per_s_per_gpu": per_s,
            **asdict(job_start.Wave([per_s], "57", 10.5, 8.2, first_step, wall, {})),
        }
        for precision, per_s, first_step, wall in (
            ("fp32", 1369.0, 9.5, 65.0),
            ("bf16", 2000.0, 7.3, 51.0),
        )
    ]
    figures = {"command": "python benchmarks/job_start.py gpu", "waves": waves}
    results = {"parts": {"job_start": {"status": "passed", "figures": figures}}}
    table = proof.markdown(results, "job_start")
    header, _, row = table.splitlines()[-3:]
    cells = dict(zip(*([c.strip() for c in line.strip("|").split("|")] for line in (header, row))))
    assert cells["step 0 s fp32 / bf16"] == "9.5 / 7.3"
    assert cells["wave wall s fp32 / bf16"] == "65 / 51"
    assert cells["bf16 speed-up"] == "1.46"


def test_packing_is_recommended_while_it_adds_a_tenth_of_the_images_per_gpu(monkeypatch):
    """Host-bound jobs gain from sharing a GPU; GPU-bound ones do not: the rule per precision."""
    job_start = load_script(ROOT / "benchmarks" / "job_start.py", monkeypatch)

    def wave(algorithm, precision, per_gpu, per_s):
        return {
            "algorithm": algorithm,
            "precision": precision,
            "jobs_per_gpu": per_gpu,
            "images_per_s_per_gpu": per_s,
        }

    waves = [
        # fp32: 2 jobs add 32% (taken), 4 add 1% more (not)
        wave("ERM", "fp32", 1, 1207.0),
        wave("ERM", "fp32", 2, 1593.0),
        wave("ERM", "fp32", 4, 1609.0),
        # bf16: summed over ERM and DMG, 2 jobs add 15%, 4 another 12%
        wave("ERM", "bf16", 1, 2000.0),
        wave("DMG", "bf16", 1, 1000.0),
        wave("ERM", "bf16", 2, 2200.0),
        wave("DMG", "bf16", 2, 1250.0),
        wave("ERM", "bf16", 4, 2500.0),
        wave("DMG", "bf16", 4, 1370.0),
        # an algorithm cut short of 4 does not count at any step
        wave("CorGrad", "bf16", 1, 10.0),
    ]
    assert job_start.recommend(waves) == {"fp32": 2, "bf16": 4}
    assert job_start.recommend(waves[:1]) == {"fp32": 1}
    # A wave is foreseen from the longest so far, as if the GPU were the bound.
    assert job_start.expected_wall([], 1) == 0.0
    walls = [{"wall": 60.0, "jobs_per_gpu": 1}, {"wall": 70.0, "jobs_per_gpu": 2}]
    assert job_start.expected_wall(walls, 4) == 240.0
