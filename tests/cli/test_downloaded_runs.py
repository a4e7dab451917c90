"""A run folder from someone else: nothing it holds runs code or makes a command write outside
its own folders (``evaluate``, ``masks``, ``select``)."""

import json

import numpy as np
import pytest
import torch
from domainbed import hparams_registry

from dmg_domainbed.runs import load_algorithm, read_run
from tests.helpers import cli


class Payload:
    """What a planted pickle does when read: here, create ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant(model_file, marker):
    """``model_file`` kept a working checkpoint, with a payload that runs when it is read."""
    checkpoint = torch.load(model_file, weights_only=False)
    torch.save({**checkpoint, "note": Payload(marker)}, model_file)


@pytest.mark.parametrize("command", ["evaluate", "masks", "select"])
def test_a_model_file_holding_code_is_refused_before_the_code_runs(command, copied_run, tmp_path):
    run = copied_run("DMG", 0)
    marker, output = tmp_path / "marker", tmp_path / "out"
    if command == "select":  # a checkpoint's model, saved by --save_model_every_checkpoint
        step = json.loads((run / "results.jsonl").read_text().splitlines()[-1])["step"]
        planted = run / f"model_step{step}.pkl"
        planted.write_bytes((run / "model.pkl").read_bytes())
        arguments = ["--input_dir", str(run.parent)]
    else:
        planted = run / "model.pkl"
        arguments = ["--run_dir", str(run)]
    plant(planted, marker)
    code, _, errors = cli(command, *arguments, "--output_dir", str(output))
    assert code == 2
    assert f"'{planted}' was not read: it names io.open" in errors
    assert "could run code planted in the file" in errors
    assert not marker.exists()
    assert not output.exists()


def test_a_model_of_sampled_hparams_holding_numpy_scalars_is_read(copied_run):
    """train.py saves the hparams DomainBed samples for hparams_seed > 0 as they come, NumPy
    scalars among them (resnet_dropout); torch's own weights-only reading refuses those."""
    run = copied_run("ERM", 0)
    sampled = hparams_registry.random_hparams("ERM", "RotatedDigits", 1)["resnet_dropout"]
    assert type(sampled) is np.float64
    checkpoint = torch.load(run / "model.pkl", weights_only=False)
    checkpoint["model_hparams"]["resnet_dropout"] = sampled
    torch.save(checkpoint, run / "model.pkl")
    algorithm = load_algorithm(read_run(run), "cpu")
    assert algorithm.hparams["resnet_dropout"] == sampled


@pytest.mark.parametrize("command", ["evaluate", "masks"])
def test_a_link_where_a_command_writes_in_a_run_is_not_written_through(
    command, copied_run, tmp_path
):
    run = copied_run("DMG", 0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / f"dmg_{command}").symlink_to(elsewhere)
    code, _, errors = cli(command, "--run_dir", str(run))
    assert code == 2
    assert f"'{run / f'dmg_{command}'}' is a link (to '{elsewhere}')" in errors
    assert "Remove the link, or give --output_dir" in errors
    assert list(elsewhere.iterdir()) == []
