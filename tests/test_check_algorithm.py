"""``dmg-domainbed check-algorithm`` names what is wrong with a broken plugin, and where; a plugin
that cannot be imported is named with its traceback wherever it is asked for by name."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from .helpers import cli, domainbed_script, fresh_domainbed, run_python

BROKEN_PLUGINS = {
    "pyproject.toml": """
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"

        [project]
        name = "broken-dg-plugins"
        version = "0.0.1"

        [project.entry-points."domainbed.algorithms"]
        ImportBroken = "broken_dg_plugins.missing_dependency:ImportBroken"
        TensorUpdate = "broken_dg_plugins:TensorUpdate"
        WrongShape = "broken_dg_plugins:WrongShape"
        NoReload = "broken_dg_plugins:NoReload"
        BadHparams = "broken_dg_plugins:BadHparams"
        """,
    "broken_dg_plugins/missing_dependency.py": """
        import a_module_nobody_installed  # noqa: F401
        """,
    "broken_dg_plugins/__init__.py": """
        import random

        import torch
        from domainbed.algorithms import ERM


        class TensorUpdate(ERM):
            def update(self, minibatches, unlabeled=None):
                return {"loss": torch.tensor(super().update(minibatches)["loss"])}


        class WrongShape(ERM):
            # class indices in evaluation, not one logit per class
            def predict(self, x):
                logits = super().predict(x)
                return logits if self.training else logits.argmax(1)


        class NoReload(ERM):
            # a running count kept in a plain tensor: not in state_dict(), left by .to()
            def __init__(self, *args):
                super().__init__(*args)
                self.updates = torch.zeros(())

            def update(self, minibatches, unlabeled=None):
                self.updates += 1
                return super().update(minibatches)

            def predict(self, x):
                return super().predict(x) + self.updates


        class BadHparams(ERM):
            HPARAMS = {
                "lr": (0.5, lambda r: 0.5),
                "noise": (0.0, lambda r: random.random()),
            }
        """,
}


def install(files: dict[str, str], root: Path) -> Path:
    """Install the package of ``files`` into a folder of its own with pip (a program only: its
    own process); returns that folder, for :func:`tests.helpers.fresh_domainbed`."""
    source, target = root / "source", root / "site"
    for name, text in files.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(textwrap.dedent(text))
    install = ["-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    run_python(*install, "--target", str(target), str(source))
    return target


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory) -> Path:
    return install(BROKEN_PLUGINS, tmp_path_factory.mktemp("broken"))


def sections(output: str) -> dict[str, str]:
    """The report of each algorithm, by name."""
    parts = re.split(r"^check-algorithm (\w+) on \w+$", output, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.fixture(scope="module")
def checked(broken_site):
    names = ["ImportBroken", "TensorUpdate", "WrongShape", "NoReload", "BadHparams"]
    with fresh_domainbed(broken_site):
        code, printed, err = cli("check-algorithm", *names)
    return code, err, sections(printed)


def failed(report: str) -> set[str]:
    return set(re.findall(r"^  FAIL  (.+?)\s{2,}", report, flags=re.M))


def test_a_broken_plugin_fails_the_check_with_exit_status_1(checked):
    code, err, found = checked
    assert code == 1, err
    assert sorted(found) == ["BadHparams", "ImportBroken", "NoReload", "TensorUpdate", "WrongShape"]


def test_an_import_error_is_shown_with_the_plugins_traceback(checked):
    report = checked[2]["ImportBroken"]
    assert failed(report) == {"import"}
    assert "No module named 'a_module_nobody_installed'" in report
    assert "broken_dg_plugins/missing_dependency.py" in report  # the line that failed
    assert "from broken-dg-plugins" in report


def test_update_returning_a_tensor_is_named_with_the_key_and_the_method(checked):
    report = checked[2]["TensorUpdate"]
    assert failed(report) == {"update"}
    assert "'loss': torch.Tensor" in report
    assert "broken_dg_plugins.TensorUpdate.update" in report and "loss.item()" in report


def test_predict_of_the_wrong_shape_names_the_expected_shape(checked):
    report = checked[2]["WrongShape"]
    assert failed(report) == {"predict"}
    assert "must give logits of shape [8, 2]" in report and "gave [8]" in report
    assert "broken_dg_plugins.WrongShape.predict" in report


def test_state_kept_outside_the_state_dict_fails_reload_and_device_move(checked):
    report = checked[2]["NoReload"]
    assert failed(report) == {"state dict", "to(device)"}
    assert "predict the same logits; they differ up to 3" in report  # its three updates counted
    assert "stayed on the CPU: updates" in report


def test_hparams_that_shadow_domainbeds_or_draw_unseeded_are_named(checked):
    report = checked[2]["BadHparams"]
    assert {"hparam names", "random hparams"} <= failed(report)
    assert "'lr' (on " in report and "silently replaces DomainBed's" in report
    assert "'noise' on " in report


def test_an_unknown_name_is_refused_with_the_registered_ones():
    code, _, err = cli("check-algorithm", "SmothERM")  # refused before any check: in-process
    assert code == 2
    assert "no algorithm 'SmothERM' is registered" in err and "ERM" in err


@pytest.mark.parametrize("images", ["0", "17"])
def test_images_per_domain_beyond_the_debug_datasets_is_refused(images):
    code, printed, err = cli("check-algorithm", "ERM", "--images_per_domain", images)
    assert code == 2 and printed == ""
    assert f"--images_per_domain {images}" in err and "give 1 to 16" in err


def test_train_names_a_plugin_that_does_not_import_with_its_traceback(broken_site, tmp_path):
    args = ["--algorithm", "ImportBroken", "--dataset", "Debug28"]
    with fresh_domainbed(broken_site):
        from dmg_domainbed.integration import PluginImportError

        with pytest.raises(PluginImportError) as refused:
            domainbed_script("train", *args, "--output_dir", str(tmp_path / "run"))
    message = str(refused.value)
    assert message.startswith("DomainBed plugin 'ImportBroken'")
    assert "broken_dg_plugins/missing_dependency.py" in message
    assert "No module named 'a_module_nobody_installed'" in message
    assert "Algorithm not found" not in message
    assert not (tmp_path / "run" / "results.jsonl").exists()
