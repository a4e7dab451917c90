"""``dmg-domainbed check-algorithm`` names what is wrong with a broken plugin, and where; a plugin
that cannot be imported is named with its traceback wherever it is asked for by name."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from types import SimpleNamespace

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
        NotAnAlgorithm = "broken_dg_plugins:make_model"
        OtherDevice = "broken_dg_plugins:OtherDevice"
        DrawsOutside = "broken_dg_plugins:DrawsOutside"
        NanUpdate = "broken_dg_plugins:NanUpdate"
        MalformedHparams = "broken_dg_plugins:MalformedHparams"
        """,
    "broken_dg_plugins/missing_dependency.py": """
        import a_module_nobody_installed  # noqa: F401
        """,
    "broken_dg_plugins/__init__.py": """
        import random

        import torch
        from domainbed.algorithms import ERM

        from dmg_domainbed.hparams import HParam, HParamSpace


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


        def make_model(input_shape, num_classes, num_domains, hparams):
            # an entry point naming a function, not the algorithm's class
            return ERM(input_shape, num_classes, num_domains, hparams)


        class OtherDevice(ERM):
            # logits moved off the images' device in evaluation
            def predict(self, x):
                logits = super().predict(x)
                return logits if self.training else logits.to("meta")


        class DrawsOutside(ERM):
            HPARAMS = HParamSpace(
                HParam("pool_alpha", 0.5, lambda r: float(r.uniform(0, 2)), maximum=1.0),
                HParam("pool_kind", "mean", lambda r: int(r.randint(3)), choices=("mean", "max")),
            )


        class NanUpdate(ERM):
            def update(self, minibatches, unlabeled=None):
                super().update(minibatches)
                return {"loss": float("nan")}


        class MalformedHparams(ERM):
            HPARAMS = {"pool_alpha": 0.4}
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


CHECKED = [
    "ImportBroken",
    "TensorUpdate",
    "WrongShape",
    "NoReload",
    "BadHparams",
    "NotAnAlgorithm",
    "OtherDevice",
    "DrawsOutside",
    "NanUpdate",
    "MalformedHparams",
]


@pytest.fixture(scope="module")
def checked(broken_site) -> SimpleNamespace:
    """One ``check-algorithm`` of every broken plugin: its exit status, what it printed on stdout
    and stderr, and each plugin's report."""
    with fresh_domainbed(broken_site):
        code, printed, err = cli("check-algorithm", *CHECKED)
    return SimpleNamespace(code=code, printed=printed, err=err, reports=sections(printed))


def failed(report: str) -> set[str]:
    return set(re.findall(r"^  FAIL  (.+?)\s{2,}", report, flags=re.M))


def not_run(report: str) -> dict[str, str]:
    """The checks not run, with the reason."""
    return dict(re.findall(r"^  skip  (.+?)\s{2,}not run: (.+)$", report, flags=re.M))


def test_a_broken_plugin_fails_the_check_with_exit_status_1(checked):
    assert checked.code == 1, checked.err
    assert sorted(checked.reports) == sorted(CHECKED)


def test_an_import_error_is_shown_once_with_the_plugins_traceback(checked):
    report = checked.reports["ImportBroken"]
    assert failed(report) == {"import"}
    assert "No module named 'a_module_nobody_installed'" in report
    assert "broken_dg_plugins/missing_dependency.py" in report  # the line that failed
    assert "from broken-dg-plugins" in report
    everywhere = checked.printed + checked.err
    assert everywhere.count("No module named 'a_module_nobody_installed'") == 1
    assert set(not_run(report)) == {
        "hparams",
        "random hparams",
        "hparam names",
        "build",
        "update",
        "predict",
        "state dict",
        "to(device)",
    }
    assert not_run(report)["hparams"] == "it needs import, which failed"
    assert not_run(report)["update"] == "it needs build, which was not run (import failed)"
    assert "not run: hparams, random hparams" in report


def test_an_entry_point_to_a_function_fails_the_import_check(checked):
    report = checked.reports["NotAnAlgorithm"]
    assert failed(report) == {"import"}
    assert "'NotAnAlgorithm = broken_dg_plugins:make_model' names a function, not a " in report
    assert "subclass of DomainBed's domainbed.algorithms.Algorithm" in report
    assert "Traceback" not in report


def test_logits_on_another_device_fail_predict_and_the_checks_that_need_it_say_so(checked):
    report = checked.reports["OtherDevice"]
    assert failed(report) == {"predict"}
    assert "must give logits on cpu" in report and "gave them on meta" in report
    assert "broken_dg_plugins.OtherDevice.predict" in report
    assert not_run(report) == {
        "state dict": "it compares a reloaded instance's predictions with predict's, which failed"
    }
    assert re.search(r"^  ok    to\(device\) ", report, flags=re.M)  # needs build only: run


def test_samplers_that_draw_outside_their_own_declaration_are_named(checked):
    report = checked.reports["DrawsOutside"]
    assert failed(report) == {"random hparams"}
    assert re.search(r"'pool_alpha': \d+ of 57 draws are refused, e\.g\. 1\.\d+", report)
    assert "it must be a number <= 1" in report
    assert re.search(r"'pool_kind': \d+ of 57 draws are refused, e\.g\. \d", report)
    assert "it must be one of 'mean', 'max'" in report
    assert re.search(r"broken_dg_plugins\.DrawsOutside\.HPARAMS \(.*__init__\.py:\d+\)", report)


def test_an_update_returning_nan_fails(checked):
    report = checked.reports["NanUpdate"]
    assert failed(report) == {"update"}
    assert "update 1 of 3 returned 'loss': nan" in report
    assert "broken_dg_plugins.NanUpdate.update" in report


def test_a_malformed_hparams_names_the_plugins_file_and_line(checked, broken_site):
    report = checked.reports["MalformedHparams"]
    assert failed(report) == {"hparams"}
    site = broken_site / "broken_dg_plugins"
    lines = (site / "__init__.py").read_text().splitlines()
    line = 1 + next(i for i, text in enumerate(lines) if '{"pool_alpha": 0.4}' in text)
    assert f"broken_dg_plugins.MalformedHparams.HPARAMS ({site / '__init__.py'}:{line})" in report
    assert "entry 'pool_alpha': 0.4 is not a (default, sampler) pair" in report
    assert "cannot unpack" not in report and "Traceback" not in report
    assert set(not_run(report)) == {
        "random hparams",
        "hparam names",
        "build",
        "update",
        "predict",
        "state dict",
        "to(device)",
    }


def test_update_returning_a_tensor_is_named_with_the_key_and_the_method(checked):
    report = checked.reports["TensorUpdate"]
    assert failed(report) == {"update"}
    assert "'loss': torch.Tensor" in report
    assert "broken_dg_plugins.TensorUpdate.update" in report and "loss.item()" in report


def test_predict_of_the_wrong_shape_names_the_expected_shape(checked):
    report = checked.reports["WrongShape"]
    assert failed(report) == {"predict"}
    assert set(not_run(report)) == {"state dict"}
    assert "must give logits of shape [8, 2]" in report and "gave [8]" in report
    assert "broken_dg_plugins.WrongShape.predict" in report


def test_state_kept_outside_the_state_dict_fails_reload_and_device_move(checked):
    report = checked.reports["NoReload"]
    assert failed(report) == {"state dict", "to(device)"}
    assert "predict the same logits; they differ up to 3" in report  # its three updates counted
    assert "stayed on the CPU: updates" in report


def test_hparams_that_shadow_domainbeds_or_draw_unseeded_are_named(checked):
    report = checked.reports["BadHparams"]
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


def test_the_debug_minibatches_draw_no_random_number():
    """The updates see torch's random stream as right after building the model, as in DomainBed's
    test_models, which stacks each domain's first images without a loader."""
    import torch

    from dmg_domainbed import algorithm_check

    run = SimpleNamespace(name="ERM", dataset="Debug28", images=4)
    run.loaded = algorithm_check.algorithm_class("ERM")
    algorithm_check._import(run)
    algorithm_check._build(run)
    after_build = torch.rand(4)
    run.build(0)  # the model alone, from the same seed
    assert torch.equal(after_build, torch.rand(4))
    assert [tuple(x.shape) for x, _ in run.minibatches] == [(4, 3, 28, 28)] * 3
