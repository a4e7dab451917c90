"""Sweep files: the shipped ones are valid; mistakes are rejected with the valid choices."""

import sys
from pathlib import Path

import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.sweep.checks import check_file
from dmg_domainbed.sweep.config import load_sweep, parse_sweep

from ..helpers import fresh_domainbed

SWEEPS = sorted((Path(__file__).parents[2] / "sweeps").glob("*.toml"))


def parse(text, tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(text)
    return load_sweep(path)


def checked(text, tmp_path):
    config = parse(text, tmp_path)  # its launcher too
    check_file(config)
    return config


PAPER_BACKBONES = ("alexnet", "resnet18", "resnet50")
BASE = '[sweep]\nalgorithms = ["ERM", "DMG"]\ndatasets = ["RotatedDigits"]\n'


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_shipped_sweep_files_are_valid_and_their_networks_build(path):
    config = load_sweep(path)  # its launcher too
    assert check_file(config)[1] == ()


def test_the_paper_and_standard_files_are_shipped():
    assert {p.stem for p in SWEEPS} >= {
        "demo",
        "domainbed_standard",
        "pacs_resnet18",
        "pacs_resnet50",
        "domainnet_resnet18",
        "domainnet_resnet50",
        *(f"paper_{data}_{net}" for data in ("pacs", "domainnet") for net in PAPER_BACKBONES),
    }


def test_defaults_are_domainbed_s(tmp_path):
    config = parse(BASE, tmp_path)
    assert (config.n_hparams, config.n_hparams_from, config.n_trials) == (20, 0, 3)
    assert config.steps is None
    assert config.single_test_envs is False and config.holdout_fraction == 0.2
    assert config.hparams_of("DMG") == {} and config.launcher is None


@pytest.mark.parametrize(
    "text, message",
    [
        (
            BASE + "n_hparam = 3\n",
            r"unknown key\(s\) n_hparam in \[sweep\]; valid keys: algorithms, ",
        ),
        (BASE + "[sweeps]\n", r"unknown key\(s\) sweeps in the file .*valid keys: sweep, launcher"),
        (
            BASE + "test_envs = [0]\n",
            r"\[sweep\] test_envs = \[0\]: a DomainBed sweep holds out every domain in turn.*"
            r"single_test_envs = true: each domain alone; false, the default: each domain and "
            r"every pair\).*python -m domainbed.scripts.train --algorithm NAME --dataset NAME "
            "--test_envs N",
        ),
        ('[sweep]\ndatasets = ["PACS"]\n', r"\[sweep\] needs algorithms"),
        (
            BASE + "n_trials = 0\n",
            r"\[sweep\] n_trials = 0 is not valid: it must be an integer between 1 and 100",
        ),
        (BASE + "steps = 2.5\n", r"steps = 2.5 is not valid"),
        (
            BASE + "save_model_every_checkpoint = 1\n",
            r"save_model_every_checkpoint = 1 is not valid: it must be true or false",
        ),
        (BASE + "n_hparams = 2\nn_hparams_from = 2\n", "must be below n_hparams"),
        (BASE + "[sweep.algorithm_hparams.IRM]\nlr = 1e-3\n", "IRM is not one of the sweep's"),
        (BASE + "[launcher]\njobs = 2\n", r"\[launcher\] has settings \(jobs\) but no name"),
        (BASE + "[sweep.hparams]\nwhen = 1979-05-27\n", "cannot be an hparam"),
        (
            BASE + 'protocol = "search-once"\n',
            r"\[sweep\] protocol = 'search-once' is not valid: .*domainbed.*search_once",
        ),
        (
            BASE + 'protocol = "search_once"\n',
            r"reads jobs with one test domain only.*Add single_test_envs = true to \[sweep\]",
        ),
        (
            BASE
            + 'single_test_envs = true\n[sweep.algorithm_hparams.DMG]\nprotocol = "search_once"\n',
            r"\[sweep.algorithm_hparams.DMG\] protocol = 'search_once': the protocol is the "
            r"sweep's.*write protocol = \"...\" in \[sweep\]",
        ),
    ],
)
def test_structure_mistakes(text, message, tmp_path):
    with pytest.raises(UserError, match=message):
        parse(text, tmp_path)


@pytest.mark.parametrize(
    "text, message",
    [
        (BASE.replace('"ERM"', '"ERMM"'), r"unknown algorithm\(s\) ERMM; valid algorithms: ERM, "),
        (BASE.replace("RotatedDigits", "PAC"), r"unknown dataset\(s\) PAC; valid datasets: .*PACS"),
        (
            BASE + "[sweep.hparams]\nlambda_overlap = 0.1\n",
            r"\[sweep.hparams\]: ERM does not know hparam 'lambda_overlap'"
            r".*\[sweep.algorithm_hparams",
        ),
        (
            BASE + "[sweep.algorithm_hparams.DMG]\nmask_lr = -1.0\n",
            "mask_lr' = -1.0 is not valid: it must be a number between 0 and 10",
        ),
        (
            BASE + '[sweep.algorithm_hparams.DMG]\nmask_layers = ["featurizer.hiddens.9"]\n',
            r"DMG's network on RotatedDigits: cannot mask layers \['featurizer.hiddens.9'\]: "
            r"unknown .* Valid layer names: featurizer, featurizer.input, ",
        ),
        (
            BASE + '[sweep.algorithm_hparams.DMG]\nmask_layers = ["classifier", "classifier"]\n',
            "mask_layers' = \\['classifier', 'classifier'\\] is not valid: it names 'classifier' "
            "more than once: give each layer once",
        ),
        (
            BASE.replace('"DMG"', '"ImportanceMask"')
            + "[sweep.algorithm_hparams.ImportanceMask]\n"
            + 'importance_layers = ["classifier", "featurizer", "classifier"]\n',
            "importance_layers' = .* is not valid: it names 'classifier' more than once",
        ),
        (
            BASE + '[launcher]\nname = "slurm"\n',
            "unknown launcher 'slurm'; .*local_parallel.*submitit",
        ),
        (
            BASE + '[launcher]\nname = "submitit"\nqueue = "gpu"\n',
            r"unknown key\(s\) queue in \[launcher\] of submitit; valid keys: cluster, partition",
        ),
        (BASE + '[launcher]\nname = "submitit"\ngpus = "two"\n', r"\[launcher\] gpus = 'two'"),
        (
            BASE + '[launcher]\nname = "local"\njobs = 2\n',
            r"unknown key\(s\) jobs in \[launcher\] of",
        ),
    ],
)
def test_names_and_hparams_are_checked_against_domainbed(text, message, tmp_path):
    with pytest.raises(UserError, match=message):
        checked(text, tmp_path)


def test_smoke_reads_a_file_whose_launcher_is_not_registered_here(tmp_path):
    """``smoke`` launches nothing: a file whose ``[launcher]`` names a launcher of another
    machine is read for its runs; ``sweep`` refuses it."""
    text = BASE + '[launcher]\nname = "their_cluster"\nqueue = "gpu"\n'
    path = tmp_path / "s.toml"
    path.write_text(text)
    assert load_sweep(path, registered=False).launcher == "their_cluster"
    with pytest.raises(UserError, match="unknown launcher 'their_cluster'"):
        load_sweep(path)


def test_a_bad_value_of_an_hparam_every_algorithm_has_is_not_told_to_move(tmp_path):
    with pytest.raises(UserError) as refused:
        checked(BASE + '[sweep.hparams]\nprecision = "BF16"\n', tmp_path)
    message = str(refused.value)
    assert (
        "[sweep.hparams]: ERM hparam 'precision' = 'BF16' is not valid: it must be one of "
        "'fp32', 'bf16'" in message
    )
    assert message.endswith(
        """Fix it in --hparams or the sweep file, e.g. '{"precision": "fp32"}'"""
    )
    assert ".." not in message and "algorithm_hparams" not in message


def test_algorithm_hparams_go_on_top_of_the_common_ones(tmp_path):
    config = checked(
        BASE + "[sweep.hparams]\nlr = 0.01\n[sweep.algorithm_hparams.DMG]\nlr = 0.002\n"
        "lambda_overlap = 0.3\n",
        tmp_path,
    )
    assert config.hparams_of("ERM") == {"lr": 0.01}
    assert config.hparams_of("DMG") == {"lr": 0.002, "lambda_overlap": 0.3}


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(UserError, match="no such sweep file"):
        load_sweep(tmp_path / "nope.toml")
    with pytest.raises(UserError, match="not valid TOML"):
        parse("[sweep\n", tmp_path)
    with pytest.raises(UserError, match="a \\[sweep\\] table is required"):
        parse_sweep({}, tmp_path / "empty.toml")


def test_a_folder_or_binary_file_given_as_the_sweep_file_is_named(tmp_path):
    with pytest.raises(UserError, match=r"is a folder: give a sweep file"):
        load_sweep(tmp_path)
    binary = tmp_path / "weights.pkl"
    binary.write_bytes(b"\x80\x04\x95\xff\xfe")
    with pytest.raises(UserError, match=r"weights.pkl is not a text file \(not UTF-8\)"):
        load_sweep(binary)


def test_reading_a_sweep_file_looks_nothing_up_in_domainbed(tmp_path):
    """Reading a file is its own step: DomainBed's algorithms and datasets are not imported,
    nor the plugins registered, until the checks ask about them."""
    path = tmp_path / "s.toml"
    path.write_text(BASE + "n_hparams = 2\n[sweep.algorithm_hparams.DMG]\nlambda_overlap = 0.2\n")
    with fresh_domainbed():
        from dmg_domainbed.sweep.config import load_sweep, resolve

        sweep = resolve(load_sweep(path), str(tmp_path), str(tmp_path / "out"))
        imported = {name for name in sys.modules if name.startswith("domainbed")}
    assert sweep.config.hparams_of("DMG") == {"lambda_overlap": 0.2}
    assert "domainbed.algorithms" not in imported and "domainbed.datasets" not in imported
