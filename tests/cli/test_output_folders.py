"""Every command that writes refuses an output folder under a regular file or one it may not
write, before any work, never overwrites a file it did not write, and names a damaged model file
instead of a raw traceback."""

import json
import shutil
import subprocess

import pytest

from tests.helpers import cli, read_only, snapshot


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


def test_report_demo_evaluate_and_masks_refuse_a_read_only_output_folder(
    demo_sweep, copied_run, tmp_path
):
    run = str(copied_run("DMG", 0))
    with read_only(tmp_path / "locked") as locked:
        commands = [
            ("report", "--input_dir", str(demo_sweep), "--output_dir", str(locked)),
            ("demo", "--output_dir", str(locked / "demo"), "--algorithms", "ERM"),
            ("evaluate", "--run_dir", run, "--output_dir", str(locked / "table3")),
            ("masks", "--run_dir", run, "--output_dir", str(locked)),
        ]
        for command in commands:
            code, printed, message = cli(*command)
            assert code == 2, command
            assert message.count("error:") == 1 and "Traceback" not in message, command
            assert f"'{locked}" in message and "may not write there" in message, command
            assert list(locked.iterdir()) == [], command


def test_a_report_file_this_user_may_not_overwrite_is_named_before_any_work(demo_sweep, tmp_path):
    output = tmp_path / "report"
    output.mkdir()
    earlier = output / "results.csv"
    earlier.write_text("an earlier report")
    earlier.chmod(0o444)  # and immutable where this process is root, whom modes do not stop
    immutable = subprocess.run(["chattr", "+i", str(earlier)], capture_output=True).returncode == 0
    try:
        code, _, message = cli(
            "report", "--input_dir", str(demo_sweep), "--output_dir", str(output)
        )
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(earlier)], capture_output=True)
    assert code == 2
    assert (
        f"--output_dir '{output}' holds 'results.csv', which this user may not overwrite" in message
    )
    assert [p.name for p in output.iterdir()] == ["results.csv"]
    assert earlier.read_text() == "an earlier report"


def test_the_demo_checks_its_report_folder_before_running_any_job(tmp_path):
    output = tmp_path / "demo"
    with read_only(output / "report"):
        code, printed, message = cli("demo", "--output_dir", str(output), "--algorithms", "ERM")
    assert code == 2 and "report' is not writable" in message
    assert printed == "" and sorted(p.name for p in output.iterdir()) == ["report"]


CUTS = (0.25, 0.5, 0.75)  # torch.load fails in several ways (RuntimeError, OSError) by the cut


@pytest.mark.parametrize("command", ["masks", "evaluate"])
def test_a_model_pkl_cut_anywhere_is_named(command, copied_run, tmp_path):
    run = copied_run("DMG", 2)
    model = run / "model.pkl"
    whole = model.read_bytes()
    for cut in CUTS:
        model.write_bytes(whole[: int(len(whole) * cut)])
        code, _, message = cli(command, "--run_dir", str(run), "--output_dir", str(tmp_path / "o"))
        assert code == 2, cut
        assert f"'{model}' cannot be read" in message and "Rerun the run" in message, cut
    assert not (tmp_path / "o").exists()


def test_select_names_a_checkpoint_model_cut_short(copied_run, tmp_path):
    run = copied_run("DMG", 3)
    whole = (run / "model.pkl").read_bytes()
    last_step = json.loads((run / "results.jsonl").read_text().splitlines()[-1])["step"]
    checkpoint = run / f"model_step{last_step}.pkl"
    for cut in CUTS:
        checkpoint.write_bytes(whole[: int(len(whole) * cut)])
        code, _, message = cli(
            "select", "--input_dir", str(run.parent), "--output_dir", str(tmp_path / "o")
        )
        assert code == 2, cut
        assert f"'{checkpoint}' cannot be read" in message, cut
    assert not (tmp_path / "o").exists()


def test_no_command_overwrites_a_file_it_did_not_write(demo_sweep, copied_run, tmp_path):
    dmg = str(copied_run("DMG", 0))
    erm_sweep = tmp_path / "erm_sweep"
    shutil.copytree(copied_run("ERM", 0), erm_sweep / "ERM_0")
    commands = {  # a file of the user's of a name each writes: known at once, or once drawn
        "results.md": ("report", "--input_dir", str(demo_sweep)),
        "accuracy_RotatedDigits.png": ("report", "--input_dir", str(demo_sweep)),
        "in_domain.md": ("evaluate", "--run_dir", dmg),
        "selection.csv": ("select", "--input_dir", str(erm_sweep)),
        "masks.png": ("masks", "--run_dir", dmg),
    }
    for name, command in commands.items():
        output = tmp_path / name.replace(".", "_")
        output.mkdir()
        (output / name).write_text("the user's own")
        code, _, message = cli(*command, "--output_dir", str(output))
        assert code == 2, command
        assert f"'{output}' holds {name}, which dmg-domainbed did not write there" in message
        assert "Nothing was written" in message and "Traceback" not in message
        assert [p.name for p in output.iterdir()] == [name], command
        assert (output / name).read_text() == "the user's own"


def test_a_report_replaces_its_own_files_but_refuses_a_folder_holding_others(demo_sweep, tmp_path):
    output = tmp_path / "report"
    report = ("report", "--input_dir", str(demo_sweep), "--output_dir", str(output))
    assert cli(*report)[0] == 0
    results = output / "results.md"
    written = results.read_text()
    results.write_text("an earlier report's numbers")
    assert cli(*report)[0] == 0
    assert results.read_text() == written  # its own file, replaced
    (output / "notes.txt").write_text("the user's notes")  # a name the report does not write
    before = snapshot(output)
    code, _, message = cli(*report)
    assert code == 2 and f"'{output}' holds notes.txt, which dmg-domainbed did not write" in message
    assert "Nothing was written" in message and snapshot(output) == before
