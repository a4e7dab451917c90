"""Every command that writes refuses an output folder under a regular file, before any work,
and a damaged model.pkl is named instead of a raw traceback."""

import pytest

from tests.helpers import cli, snapshot


@pytest.fixture
def blocker(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("not a folder")
    return path


def test_demo_report_evaluate_masks_and_sweep_refuse_an_output_under_a_file(
    blocker, demo_sweep, copied_run
):
    run = str(copied_run("DMG", 0))
    out = str(blocker / "out")
    commands = [
        ("demo", "--output_dir", out, "--algorithms", "ERM"),
        ("report", "--input_dir", str(demo_sweep), "--output_dir", out),
        ("evaluate", "--run_dir", run, "--output_dir", out),
        ("masks", "--run_dir", run, "--output_dir", out),
        ("sweep", "sweeps/demo.toml", "--output_dir", out, "--launcher", "local"),
    ]
    for command in commands:
        code, _, message = cli(*command)
        assert code == 2, command
        assert f"lies under '{blocker}', which is a file" in message, command
    assert blocker.read_text() == "not a folder"


@pytest.mark.parametrize("command", ["masks", "evaluate"])
def test_a_cut_short_model_pkl_is_named(command, copied_run, tmp_path):
    run = copied_run("DMG", 1)
    model = run / "model.pkl"
    model.write_bytes(model.read_bytes()[:1000])
    before = snapshot(run)
    code, _, message = cli(command, "--run_dir", str(run), "--output_dir", str(tmp_path / "o"))
    assert code == 2
    assert f"'{model}' cannot be read" in message and "Rerun the run" in message
    assert snapshot(run) == before
