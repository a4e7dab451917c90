"""``dmg-domainbed doctor``: exit status 0 only when a run would start, 1 when it would not,
2 for bad input; the report names what is missing and where it belongs."""

import os
import re
import sys
from pathlib import Path

import pytest
from huggingface_hub import constants

from dmg_domainbed.cli import main
from dmg_domainbed.preflight import environment

from ..helpers import domainbed_env, fresh_process_that_registers_erm_and_pacs, read_only


@pytest.fixture
def env(monkeypatch, tmp_path):
    """This python first on PATH, empty weight caches."""
    monkeypatch.delenv("DMG_DOMAINBED_DISABLE", raising=False)
    monkeypatch.setenv("PATH", domainbed_env()["PATH"])
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    return monkeypatch


def doctor(capsys, *args):
    code = main(["doctor", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_not_ready_without_data_and_weights(env, capsys, tmp_path):
    registered = environment.ProbeResult(
        python="python",
        executable=sys.executable,
        domainbed="/opt/DomainBed/domainbed",
        algorithms=["ERM", "Aggregate", "CorGrad", "DMG", "ImportanceMask", "MultiHead"],
        datasets=["PACS", "RotatedDigits"],
        launchers=["local", "local_parallel", "submitit"],
    )
    env.setattr(environment, "probe_fresh_process", lambda: registered)
    code, out, _ = doctor(
        capsys,
        "--dataset",
        "PACS",
        "--data_dir",
        str(tmp_path / "data"),
        "--hparams",
        '{"resnet18": true, "resnet50_augmix": false}',
    )
    assert code == 1
    assert f"expected {tmp_path / 'data' / 'PACS'}/ with 4 domain folders" in out
    checkpoints = tmp_path / "torch" / "hub" / "checkpoints"
    assert (
        "MISSING torchvision resnet18 ImageNet weights (IMAGENET1K_V1): not found at "
        f"{checkpoints / 'resnet18-f37072fd.pth'}" in out
    )
    assert "timm" not in out  # resnet50_augmix off: timm's weights are not needed
    assert "NOT READY: a run of DMG on PACS would not start; see: pretrained weights, data" in out


@pytest.mark.parametrize("disable, blamed", [("1", True), ("0", False), ("false", False)])
def test_not_ready_when_a_fresh_process_does_not_register_the_plugins(env, capsys, disable, blamed):
    unregistered = fresh_process_that_registers_erm_and_pacs()
    env.setattr(environment, "probe_fresh_process", lambda: unregistered)
    env.setenv("DMG_DOMAINBED_DISABLE", disable)
    code, out, _ = doctor(capsys)
    assert code == 1
    assert "DMG is not registered in that process" in out
    assert "not registered: Aggregate" in out
    # the start-up hook reads "0" and "false" as unset: then the variable is not the cause
    assert ("DMG_DOMAINBED_DISABLE is set" in out) is blamed


def test_ready_for_the_embedded_dataset_checked_in_the_python_the_jobs_run(env, capsys, tmp_path):
    # The sweep puts this interpreter's folder first on PATH for its jobs: so does the doctor,
    # whatever `python` the shell's PATH would find (here: none).
    env.setenv("PATH", str(tmp_path))
    code, out, _ = doctor(capsys, "--dataset", "RotatedDigits")
    assert code == 0
    jobs_python = os.path.join(os.path.dirname(sys.executable), "python")
    assert f"as the jobs start it ({jobs_python})" in out
    assert "READY: a run of DMG on RotatedDigits would start" in out
    assert "algorithms registered: " in out and "DMG" in out.split("algorithms registered: ")[1]
    assert "RotatedDigits: no files needed" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dataset", "PAC"], "unknown dataset 'PAC'; choose one of: .*PACS"),
        (["--algorithm", "DGM"], "unknown algorithm 'DGM'; choose one of: .*DMG"),
        (["--hparams", "{resnet18: true}"], "--hparams is not valid JSON"),
        (["--hparams", '{"resnet_18": true}'], "DMG does not know hparam 'resnet_18'"),
    ],
)
def test_bad_input_exits_2_with_the_choices(args, message, env, capsys):
    code, out, err = doctor(capsys, *args)
    assert code == 2 and out == ""
    assert re.search(message, err)


def test_alexnet_runs_are_checked_for_torchvisions_alexnet_file(env, capsys, tmp_path):
    registered = environment.ProbeResult(
        python="python",
        executable=sys.executable,
        domainbed="/opt/DomainBed/domainbed",
        algorithms=["ERM", "Aggregate", "DMG", "MultiHead"],
        datasets=["PACS"],
        launchers=["local"],
    )
    env.setattr(environment, "probe_fresh_process", lambda: registered)
    code, out, _ = doctor(capsys, "--algorithm", "Aggregate", "--hparams", '{"alexnet": true}')
    checkpoints = tmp_path / "torch" / "hub" / "checkpoints"
    assert "Aggregate on 224x224 image datasets (alexnet=True" in out
    assert (
        "MISSING torchvision alexnet ImageNet weights (IMAGENET1K_V1): not found at "
        f"{checkpoints / 'alexnet-owt-7be5be79.pth'}" in out
    )
    assert "resnet50-0676ba61.pth" not in out and "timm" not in out
    checkpoints.mkdir(parents=True)
    (checkpoints / "alexnet-owt-7be5be79.pth").write_bytes(b"")
    code, out, _ = doctor(capsys, "--algorithm", "Aggregate", "--hparams", '{"alexnet": true}')
    assert "cached  torchvision alexnet ImageNet weights" in out


@pytest.fixture
def registered(env):
    """A fresh process that registers every plugin (the probe itself is tested above)."""
    probe = environment.ProbeResult(
        python="python",
        executable=sys.executable,
        domainbed="/opt/DomainBed/domainbed",
        algorithms=["ERM", "Aggregate", "CorGrad", "DMG", "ImportanceMask", "MultiHead"],
        datasets=["PACS", "RotatedDigits"],
        launchers=["local", "local_parallel", "submitit"],
    )
    env.setattr(environment, "probe_fresh_process", lambda: probe)
    return env


def test_a_missing_weight_file_fails_a_run_on_its_dataset_not_the_demo(
    registered, capsys, tmp_path
):
    resnet18 = ["--hparams", '{"resnet18": true, "resnet50_augmix": false}']
    missing = "MISSING torchvision resnet18 ImageNet weights"
    code, out, _ = doctor(capsys, *resnet18)  # what runs here: the demo
    assert code == 0 and missing in out
    assert "[warn] pretrained weights" in out
    assert "READY: the demo (dmg-domainbed demo, on RotatedDigits) would start" in out
    assert (
        "before a sweep of DMG on 224x224 image datasets: get the pretrained weights listed "
        "MISSING above" in out
    )
    code, out, _ = doctor(capsys, "--dataset", "PACS", "--data_dir", str(tmp_path), *resnet18)
    assert code == 1 and missing in out
    assert "[FAIL] pretrained weights" in out
    assert "NOT READY: a run of DMG on PACS would not start; see: pretrained weights" in out


def test_a_read_only_home_is_named_as_where_weights_cannot_be_written_with_the_fix(
    registered, capsys, tmp_path
):
    home = tmp_path / "home"
    registered.setenv("TORCH_HOME", str(home / ".cache" / "torch"))
    registered.setattr(constants, "HF_HUB_CACHE", str(home / ".cache" / "huggingface" / "hub"))
    with read_only(home):
        code, out, _ = doctor(capsys)
    torch_hub = home / ".cache" / "torch" / "hub" / "checkpoints"
    assert code == 0 and "MISSING torchvision resnet50 ImageNet weights" in out
    assert f"cannot write {torch_hub}: {home} is not writable" in out
    assert f"cannot write {home / '.cache' / 'huggingface' / 'hub'}" in out
    assert "export TORCH_HOME=" in out and "HF_HOME=" in out
    assert out.rstrip().endswith("their caches cannot be written here: set the folders named above")


def test_a_bare_doctor_needs_the_demos_dataset_registered(env, capsys):
    unregistered = fresh_process_that_registers_erm_and_pacs()
    unregistered.algorithms = [*unregistered.algorithms, "DMG"]
    env.setattr(environment, "probe_fresh_process", lambda: unregistered)
    code, out, _ = doctor(capsys)
    assert code == 1
    assert "RotatedDigits is not registered in that process" in out
    assert "NOT READY: the demo would not start; see: plugins" in out


def fake_distribution(site, name, version, requires=()):
    """An installed distribution of ``name`` as pip lays it out: metadata and version.py."""
    info = site / f"{name}-{version.partition('+')[0]}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version.partition('+')[0]}"]
    lines += [f"Requires-Dist: {requirement}" for requirement in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (site / name).mkdir()
    (site / name / "version.py").write_text(f"__version__ = '{version}'\ncuda = None\n")


def test_a_cpu_torch_with_a_cuda_torchvision_fails_with_the_pip_command_that_matches_them(
    registered, capsys, tmp_path
):
    # What pip leaves where the CPU index is unreachable: a CPU torch, a CUDA torchvision.
    site = tmp_path / "site"
    fake_distribution(site, "torch", "2.5.1+cpu")
    fake_distribution(site, "torchvision", "0.20.1+cu124", ["torch (==2.5.1)"])
    registered.syspath_prepend(str(site))  # found before the real ones; nothing is imported
    code, out, _ = doctor(capsys, "--dataset", "RotatedDigits")
    assert code == 1
    assert "[FAIL] torch and torchvision" in out
    assert "torch 2.5.1+cpu and torchvision 0.20.1+cu124 are different builds" in out
    command = (
        f"{sys.executable} -m pip install --force-reinstall --no-deps torch==2.5.1 "
        "torchvision==0.20.1 --index-url https://download.pytorch.org/whl/cpu"
    )
    assert f"install a matching pair from one index: {command}" in out
    main_index = (
        f"{sys.executable} -m pip install --force-reinstall torch==2.5.1 torchvision==0.20.1 "
        "--index-url https://pypi.org/simple"
    )
    assert (
        "where https://download.pytorch.org/whl/cpu cannot be reached, the same pair from the main "
        f"index (CUDA builds, which run on a CPU too): {main_index}" in out
    )
    assert "see: torch and torchvision" in out


def test_the_readme_s_pair_from_the_main_index_is_one_doctor_calls_matching():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    torch, torchvision = re.search(
        r"main index, e\.g\. `pip install\s+torch==(\S+) torchvision==(\S+)`", readme
    ).groups()
    builds = [
        environment.Build("torch", torch, ""),
        environment.Build("torchvision", torchvision, "", pinned_torch=torch),
    ]
    assert environment.torch_pair_problem(*builds) is None


def test_torch_and_torchvision_of_different_releases_are_named(registered, capsys, tmp_path):
    site = tmp_path / "site"
    fake_distribution(site, "torch", "2.5.1+cu124")
    fake_distribution(site, "torchvision", "0.19.1+cu124", ["torch (==2.4.1)"])
    registered.syspath_prepend(str(site))
    code, out, _ = doctor(capsys)
    assert code == 1
    assert "torch 2.5.1 goes with torchvision 0.20.1, not 0.19.1" in out
    pair = "torch==2.5.1 torchvision==0.20.1"
    assert f"{pair} --index-url https://download.pytorch.org/whl/cu124" in out


def test_the_installed_torch_and_torchvision_are_read_without_importing_them():
    torch, torchvision = (environment.installed_build(n) for n in ("torch", "torchvision"))
    import torch as imported
    import torchvision as imported_vision

    assert f"{torch.version}+{torch.label}".rstrip("+") == imported.__version__
    assert f"{torchvision.version}+{torchvision.label}".rstrip("+") == imported_vision.__version__
    assert environment.torch_pair_problem() is None  # this environment's pair imports


def test_the_checkout_install_domainbed_made_is_named(registered, capsys, tmp_path):
    from dmg_domainbed import domainbed_setup
    from dmg_domainbed.datasets.check.downloads import domainbed_checkout

    registered.setattr(
        domainbed_setup, "pth_file", lambda _=None: tmp_path / domainbed_setup.PTH_NAME
    )
    (tmp_path / domainbed_setup.PTH_NAME).write_text(f"{domainbed_checkout()}\n")
    code, out, _ = doctor(capsys, "--dataset", "RotatedDigits")
    assert code == 0
    pth = tmp_path / domainbed_setup.PTH_NAME
    assert f"importable through {pth}, the file `dmg-domainbed install-domainbed` writes" in out
