"""A run on disk: its records, the checks that name what to give, and its properties."""

import json

import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting.learned import require_drawing
from dmg_domainbed.runs import (
    read_records,
    read_run,
    require_model,
    require_sweep,
    run_folders,
    wrong_field,
)
from tests.helpers import cli

ARGS = {
    "algorithm": "DMG",
    "dataset": "RotatedDigits",
    "test_envs": [1],
    "hparams_seed": 2,
    "trial_seed": 1,
}


def write_run(folder, records, text_after=""):
    folder.mkdir(parents=True)
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (folder / "results.jsonl").write_text(lines + text_after)
    return folder


def record(step):
    return {"step": step, "args": ARGS, "hparams": {"lr": 0.001}}


def test_a_half_written_last_line_is_left_out_with_a_warning_naming_the_file(tmp_path, capsys):
    folder = write_run(tmp_path / "run", [record(0), record(100)], '{"step": 200, "ar')
    assert [r["step"] for r in read_records(folder / "results.jsonl")] == [0, 100]
    warning = capsys.readouterr().err
    assert f"'{folder / 'results.jsonl'}': its last line is half-written" in warning
    assert "the 2 complete record(s) before it are used" in warning
    assert read_run(folder).records[-1]["step"] == 100


def test_a_damaged_line_before_the_last_is_an_error_naming_file_and_line(tmp_path):
    folder = write_run(tmp_path / "run", [record(0)], '{"step": 1\n' + json.dumps(record(2)))
    with pytest.raises(UserError, match=r"results.jsonl' is damaged at line 2 of 3"):
        read_records(folder / "results.jsonl")


def test_run_properties_follow_train_py_args(tmp_path):
    run = read_run(write_run(tmp_path / "run", [record(0), record(100)]))
    assert (run.algorithm, run.dataset, run.test_envs) == ("DMG", "RotatedDigits", [1])
    assert run.environments() == ["0", "30", "60", "90"]
    assert run.source_envs() == [0, 2, 3]
    assert run.domain_names() == ["d0 = 0", "d1 = 60", "d2 = 90"]
    assert run.title() == "RotatedDigits, test domain 30 (hparams 2, trial 1, step 100)"


def test_wrong_folders_get_messages_that_say_what_to_give(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        read_run(tmp_path / "nope")
    sweep = tmp_path / "sweep"
    write_run(sweep / "a", [record(0)])
    with pytest.raises(UserError, match=r"looks like a sweep folder with 1 runs.*--run_dir"):
        read_run(sweep)
    empty = write_run(tmp_path / "empty", [])
    with pytest.raises(UserError, match="not reached its first checkpoint"):
        read_run(empty)
    with pytest.raises(UserError, match="has no model.pkl.*'done'"):
        require_model(read_run(sweep / "a"))
    assert run_folders(sweep) == [sweep / "a"]
    assert require_sweep(sweep) == sweep
    with pytest.raises(UserError, match="It is a single run"):
        require_sweep(sweep / "a")
    (tmp_path / "demo" / "sweep").mkdir(parents=True)
    with pytest.raises(UserError, match="Did you mean --input_dir"):
        require_sweep(tmp_path / "demo")


def test_a_run_of_an_algorithm_that_draws_nothing_names_runs_that_do(tmp_path):
    sweep = tmp_path / "sweep"
    erm = write_run(sweep / "erm", [{**record(0), "args": {**ARGS, "algorithm": "ERM"}}])
    dmg = write_run(sweep / "dmg", [record(0)])
    require_drawing(read_run(dmg), "masks")
    with pytest.raises(UserError) as error:
        require_drawing(read_run(erm), "masks")
    assert "is a run of ERM, which draws nothing" in str(error.value)
    assert "DMG" in str(error.value) and str(dmg) in str(error.value)


def test_runs_that_draw_are_named_past_a_neighbour_whose_record_is_not_train_py_s(tmp_path):
    sweep = tmp_path / "sweep"
    erm = write_run(sweep / "erm", [{**record(0), "args": {**ARGS, "algorithm": "ERM"}}])
    write_run(sweep / "listed", [record(0), [1, 2]])
    damaged = write_run(sweep / "m_damaged", [record(0)])  # a line cut short, not its last
    erm_record = json.dumps({**record(0), "args": {**ARGS, "algorithm": "ERM"}})
    (damaged / "results.jsonl").write_text('{"step": 0, "ar\n' + erm_record + "\n")
    dmg = write_run(sweep / "z_dmg", [record(0)])
    with pytest.raises(UserError, match=f"Runs of those next to it: {dmg}"):
        require_drawing(read_run(erm), "masks")


def test_two_runs_appended_into_one_folder_are_refused_naming_it(tmp_path):
    """train.py appends: a second run with the same --output_dir leaves both in one file."""
    logged = {"env1_in_acc": 0.5, "env1_out_acc": 0.5}
    args = {**ARGS, "output_dir": "sweep/run"}
    steps = [0, 10, 20, 29, 0, 10, 14]
    run = write_run(
        tmp_path / "sweep" / "run", [{**record(s), "args": args, **logged} for s in steps]
    )
    with pytest.raises(UserError) as error:
        read_run(run)
    said = f"'{run}' holds more than one training run: line 5 of results.jsonl is step 0, "
    said += "after step 29"
    assert said in str(error.value)
    code, _, message = cli(
        "report", "--input_dir", str(run.parent), "--output_dir", str(tmp_path / "o")
    )
    assert code == 2 and said in message
    assert not (tmp_path / "o").exists()


def test_the_first_wrong_field_is_named_in_the_records_order_of_reading():
    """args' own fields are checked in the order train.py's record reads: algorithm first."""
    wrong = {"step": 1, "args": {"algorithm": 5, "test_envs": "x"}, "hparams": {}}
    assert wrong_field(wrong) == "args.algorithm is 5 (a number); expected text"


def test_numbers_of_a_float_subclass_are_numbers():
    """A record built in Python may hold numpy's floats: an accuracy, a holdout fraction."""
    import numpy

    args = {**ARGS, "holdout_fraction": numpy.float64(0.2)}
    assert wrong_field({**record(0), "args": args, "env1_in_acc": numpy.float64(0.5)}) is None
    assert wrong_field({**record(0), "env1_in_acc": True}) == (
        "env1_in_acc is true (true or false); expected a number (an accuracy)"
    )


def test_whole_numbers_of_an_int_subclass_are_whole_numbers():
    """A record built in Python may hold an int subclass (an IntEnum); true is no number."""
    import enum

    seed = enum.IntEnum("Seed", {"FIRST": 1}).FIRST
    envs = {**ARGS, "trial_seed": seed, "test_envs": [seed]}
    assert wrong_field({**record(0), "args": envs, "step": seed}) is None
    assert wrong_field({**record(0), "args": {**ARGS, "test_envs": [True]}}) == (
        "args.test_envs is [true] (a list); expected a list of environment numbers "
        "(whole numbers from 0)"
    )
