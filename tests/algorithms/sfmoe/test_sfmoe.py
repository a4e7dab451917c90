"""SFMOE: distilled DeiT-S with sparse MoE blocks, built with random weights (no download)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from domainbed import algorithms, datasets, hparams_registry

from dmg_domainbed.algorithms.sfmoe import network as sfmoe_network
from dmg_domainbed.algorithms.sfmoe import weights as deit_weights
from dmg_domainbed.algorithms.sfmoe.moe import SparseMoE
from dmg_domainbed.algorithms.sfmoe.sfmoe import SFMOE
from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting import in_domain
from dmg_domainbed.reporting.outputs import RECORD
from dmg_domainbed.runs import read_run

from ...helpers import domainbed_script, one_loader_worker

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

SHAPE = (3, 224, 224)
OFFLINE = {"sfmoe_pretrained": False}


def build(dataset="PACS", num_classes=7, num_domains=3, **hp) -> SFMOE:
    hparams = hparams_registry.default_hparams("SFMOE", dataset)
    hparams.update(OFFLINE, **hp)
    return algorithms.get_algorithm_class("SFMOE")(SHAPE, num_classes, num_domains, hparams)


def parameters(module: torch.nn.Module) -> float:
    return round(sum(p.numel() for p in module.parameters()) / 1e6, 2)


@pytest.fixture(scope="module")
def sfmoe() -> SFMOE:
    """One SFMOE with DomainBed's PACS hparams and random weights, shared by read-only tests."""
    torch.manual_seed(0)
    return build()


def test_registered_with_the_authors_hparams_per_dataset():
    assert algorithms.get_algorithm_class("SFMOE") is SFMOE
    table = {
        "PACS": (3e-5, 0.0),
        "VLCS": (1e-5, 1e-6),
        "OfficeHome": (3e-5, 1e-6),
        "TerraIncognita": (3e-5, 1e-4),
        "DomainNet": (3e-5, 0.0),
    }
    for dataset, (lr, weight_decay) in table.items():
        defaults = hparams_registry.default_hparams("SFMOE", dataset)
        assert (defaults["lr"], defaults["weight_decay"]) == (lr, weight_decay), dataset
        assert defaults["batch_size"] == 32  # DomainBed's
        for seed in range(5):
            drawn = hparams_registry.random_hparams("SFMOE", dataset, seed)
            assert 10**-4.5 <= drawn["lr"] <= 10**-2.5 and drawn["weight_decay"] == 0.0
            moe = {k: v for k, v in drawn.items() if k.startswith("sfmoe_")}
            assert moe == {k: v for k, v in defaults.items() if k.startswith("sfmoe_")}
    other = hparams_registry.default_hparams("SFMOE", "SVIRO")
    assert other["lr"] == 3e-5 and other["weight_decay"] == 0.0  # DomainBed's weight decay
    assert hparams_registry.random_hparams("SFMOE", "SVIRO", 1)["weight_decay"] > 0
    assert defaults["sfmoe_blocks"] == [5, 11] and defaults["sfmoe_experts"] == 4


def test_inputs_that_are_not_rgb_or_grayscale_images_are_refused_before_anything_is_built(
    monkeypatch,
):
    def never(*args):
        raise AssertionError("the network was built")

    monkeypatch.setattr(sfmoe_network, "build_network", never)
    for shape in [(2, 28, 28), (2, 224, 224), (64,)]:
        hparams = hparams_registry.default_hparams("SFMOE", "PACS")
        with pytest.raises(
            UserError, match=r"3 \(RGB\) or 1 \(grayscale\).*PACS.*DomainNet"
        ) as error:
            SFMOE(shape, 7, 3, hparams)
        assert str(shape) in str(error.value)


@pytest.mark.parametrize(
    "bad, says",
    [
        ({"sfmoe_blocks": [5, 12]}, "block indices"),
        ({"sfmoe_blocks": "5,11"}, "sfmoe_blocks"),
        ({"sfmoe_expert_init": "upcycle"}, "'random', 'copy'"),
        ({"sfmoe_second_policy": "sometimes"}, "sfmoe_second_policy"),
        ({"sfmoe_capacity_train": 0.0}, "must be a number > 0"),
        ({"sfmoe_experts": 1}, ">= 2"),
    ],
)
def test_bad_hparams_are_refused_with_what_is_allowed(monkeypatch, bad, says):
    monkeypatch.setattr(sfmoe_network, "build_network", lambda *a: pytest.fail("built"))
    hparams = hparams_registry.default_hparams("SFMOE", "PACS")
    hparams.update(bad)
    with pytest.raises(UserError, match=says):
        SFMOE(SHAPE, 7, 3, hparams)


def test_network_is_distilled_deit_small_with_moe_in_blocks_5_and_11(sfmoe):
    blocks = sfmoe.network.blocks
    assert len(blocks) == 12 and sfmoe.network.embed_dim == 384
    assert [i for i, b in enumerate(blocks) if isinstance(b.mlp, SparseMoE)] == [5, 11]
    layer = blocks[5].mlp
    assert (layer.num_experts, layer.top_k, layer.second_policy) == (4, 2, "random")
    assert layer.experts.w1.shape == (4, 384, 1536) and layer.experts.b1 is None
    assert layer.capacity(198) == 61 and layer.balance_weight == 0.01
    # the paper's parameter counts, 7 classes
    assert parameters(sfmoe.network) == 28.75
    dense = sfmoe_network.create_backbone(7, pretrained=False)
    assert parameters(dense) == 21.67


def test_update_logs_its_loss_terms_and_trains_the_moe_layers():
    """On Debug224's random images, two per domain."""
    hparams = hparams_registry.default_hparams("SFMOE", "Debug224")
    hparams.update(OFFLINE)
    dataset = datasets.get_dataset_class("Debug224")("", [], hparams)
    minibatches = [
        (torch.stack([env[i][0] for i in range(2)]), torch.stack([env[i][1] for i in range(2)]))
        for env in dataset
    ]
    algorithm = algorithms.get_algorithm_class("SFMOE")(
        dataset.input_shape, dataset.num_classes, len(dataset), hparams
    )
    before = copy.deepcopy(algorithm.network.blocks[5].mlp.state_dict())
    logged = algorithm.update(minibatches)
    assert set(logged) == {
        "loss",
        "ce",
        "balance",
        "dropped/block5",
        "dropped/block11",
        "second/block5",
        "second/block11",
    }
    assert logged["loss"] == pytest.approx(logged["ce"] + logged["balance"], rel=1e-6)
    assert 0.02 <= logged["balance"] <= 0.08  # two layers, each 0.01 (balanced) .. 0.04
    after = algorithm.network.blocks[5].mlp.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in ("gate", "experts.w1"))
    algorithm.eval()
    assert algorithm.predict(minibatches[0][0]).shape == (2, dataset.num_classes)


def test_predict_gives_the_same_logits_for_the_same_input(sfmoe):
    sfmoe.eval()
    x = torch.randn(3, *SHAPE)
    with torch.no_grad():
        first, again = sfmoe.predict(x), sfmoe.predict(x)
    assert torch.equal(first, again)
    kept = sfmoe.network.blocks[11].mlp.routing.kept[..., 1]
    assert 0 < kept.float().mean() < 1  # the random second-expert policy is still at work


def test_other_image_sizes_are_resized_to_the_patch_grid_and_gray_repeated_to_rgb(sfmoe):
    sfmoe.eval()
    small = torch.randn(2, 3, 28, 28)
    resized = F.interpolate(small, size=(224, 224), mode="bilinear", align_corners=False)
    gray = torch.randn(2, 1, 224, 224)
    with torch.no_grad():
        assert torch.equal(sfmoe.predict(small), sfmoe.predict(resized))
        assert torch.equal(sfmoe.predict(gray), sfmoe.predict(gray.expand(-1, 3, -1, -1)))
    SFMOE.check_input_shape((1, 28, 28))  # RotatedMNIST's images are taken


def test_copied_experts_with_every_token_kept_give_the_dense_logits():
    torch.manual_seed(0)
    dense = sfmoe_network.create_backbone(7, pretrained=False).eval()
    upcycled = copy.deepcopy(dense)
    sfmoe_network.insert_moe(
        upcycled, [5, 11], "copy", second_policy="all", capacity_factor_eval=4.0
    )
    upcycled.eval()
    x = torch.randn(2, *SHAPE)
    with torch.no_grad():
        difference = (upcycled(x) - dense(x)).abs().max().item()
    assert difference < 1e-5
    assert all(upcycled.blocks[b].mlp.routing.kept.all() for b in (5, 11))


def test_dense_baseline_is_the_same_class_without_moe_blocks():
    torch.manual_seed(0)
    dense = build(sfmoe_blocks=[])
    assert not any(isinstance(m, SparseMoE) for m in dense.modules())
    minibatches = [(torch.randn(1, *SHAPE), torch.tensor([d])) for d in range(3)]
    logged = dense.update(minibatches)
    assert logged["balance"] == 0.0 and logged["loss"] == logged["ce"]


@pytest.fixture(scope="module")
def imagenet_file(tmp_path_factory):
    """A checkpoint in the layout of DeiT's released file: ``{"model": state_dict}`` of the
    1000-class distilled DeiT-S (random values: only names and shapes matter here)."""
    torch.manual_seed(1)
    reference = sfmoe_network.create_backbone(1000, pretrained=False)
    path = tmp_path_factory.mktemp("weights") / "deit_small_distilled_patch16_224-649709d9.pth"
    torch.save({"model": reference.state_dict()}, path)
    return path, reference.state_dict()


@pytest.fixture
def empty_caches(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    return tmp_path


def test_pretrained_weights_load_offline_from_the_sfmoe_weights_file(imagenet_file, empty_caches):
    path, saved = imagenet_file
    algorithm = build(sfmoe_pretrained=True, sfmoe_weights=str(path), sfmoe_expert_init="copy")
    state = algorithm.network.state_dict()
    assert torch.equal(state["blocks.0.attn.qkv.weight"], saved["blocks.0.attn.qkv.weight"])
    assert state["head.weight"].shape == (7, 384)  # a new head for the dataset's classes
    copied = algorithm.network.blocks[5].mlp.experts
    for e in range(4):  # upcycling: every expert is the pretrained dense MLP
        assert torch.equal(copied.w1[e], saved["blocks.5.mlp.fc1.weight"].t())
        assert torch.equal(copied.b2[e, 0], saved["blocks.5.mlp.fc2.bias"])


def test_weights_are_looked_up_in_the_hub_cache_then_in_torch_hub(imagenet_file, empty_caches):
    path, _ = imagenet_file
    assert deit_weights.find_weights("") is None
    checkpoints = empty_caches / "torch" / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / path.name).write_bytes(path.read_bytes())
    assert deit_weights.find_weights("") == checkpoints / path.name
    repo = empty_caches / "hf" / "models--timm--deit_small_distilled_patch16_224.fb_in1k"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "model.safetensors").write_bytes(b"")
    assert deit_weights.find_weights("") == repo / "snapshots" / "abc123" / "model.safetensors"
    with pytest.raises(UserError, match="sfmoe_weights.*not a file"):
        deit_weights.find_weights(str(empty_caches / "nowhere.pth"))


def doctor_weights(capsys, monkeypatch, hparams: dict) -> tuple[int, str]:
    from dmg_domainbed.cli import main
    from dmg_domainbed.preflight import environment

    registered = environment.ProbeResult(
        python="python",
        executable="python",
        domainbed="/opt/DomainBed/domainbed",
        algorithms=["ERM", "SFMOE"],
        datasets=["PACS", "RotatedDigits"],
        launchers=["local"],
    )
    monkeypatch.setattr(environment, "probe_fresh_process", lambda: registered)
    code = main(["doctor", "--algorithm", "SFMOE", "--hparams", json.dumps(hparams)])
    return code, capsys.readouterr().out


def test_doctor_says_where_it_looked_whether_the_file_fits_and_how_to_get_it(
    imagenet_file, empty_caches, monkeypatch, capsys
):
    path, saved = imagenet_file
    code, out = doctor_weights(capsys, monkeypatch, {})
    assert "absent  timm deit_small_distilled_patch16_224.fb_in1k" in out
    assert "models--timm--deit_small_distilled_patch16_224.fb_in1k" in out
    assert f"deit_small_distilled_patch16_224-649709d9.pth in {empty_caches}/torch" in out
    assert "to get them: on a machine with internet" in out
    assert "resnet" not in out  # SFMOE loads none of DomainBed's backbones

    code, out = doctor_weights(capsys, monkeypatch, {"sfmoe_weights": str(path)})
    assert f"found   sfmoe_weights file: {path.name}" in out
    assert "loads and has every tensor of deit_small_distilled_patch16_224" in out
    assert "blocks.5.mlp.fc1.weight (1536, 384)" in out and "not used" in out
    assert code == 0

    wrong = path.parent / "wrong.pth"
    torch.save({"model": {k: v[..., :1] for k, v in saved.items()}}, wrong)
    code, out = doctor_weights(capsys, monkeypatch, {"sfmoe_weights": str(wrong)})
    assert "loads but does not fit" in out and "instead of" in out
    # a file that does not fit fails the check with or without --dataset: the same verdict
    assert "[FAIL] pretrained weights" in out and code == 1


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """DomainBed's own train.py runs SFMOE in this process for one step on Debug224 (random
    224x224 images), a batch of two per domain, random weights; test domain 0. train.py
    evaluates the step on every split (48 images through DeiT-S: most of the run's cost)."""
    output = tmp_path_factory.mktemp("sfmoe_run")
    hparams = {**OFFLINE, "batch_size": 2}
    args = ["--algorithm", "SFMOE", "--dataset", "Debug224", "--test_envs", "0", "--steps", "1"]
    args += ["--hparams", json.dumps(hparams), "--output_dir", str(output)]
    with one_loader_worker():
        domainbed_script("train", *args)
    return read_run(output)


def test_domainbeds_train_runs_sfmoe(trained_run):
    assert [r["step"] for r in trained_run.records] == [0]
    last = trained_run.records[-1]
    assert last["hparams"]["sfmoe_blocks"] == [5, 11] and last["hparams"]["lr"] == 3e-5
    assert 0 < last["balance"] < 0.1 and "dropped/block11" in last
    assert (trained_run.path / "model.pkl").is_file()


def test_evaluation_reproduces_the_accuracy_train_py_logged(trained_run):
    frame = in_domain.evaluate_run(trained_run, device="cpu")
    predict = frame[frame["prediction"] == "SFMOE (predict)"]
    assert sorted(predict["env"]) == [1, 2]
    assert (predict["accuracy"] - predict["logged"]).abs().max() < 1e-9


def test_masks_command_draws_routing_attention_and_expert_load(trained_run, tmp_path, capsys):
    from dmg_domainbed.cli import main

    output = tmp_path / "pictures"
    code = main(["masks", "--run_dir", str(trained_run.path), "--output_dir", str(output)])
    printed = capsys.readouterr().out
    assert code == 0
    files = ["masks.png", "masks_expert_load.png", "masks_expert_load.csv"]
    assert sorted(p.name for p in output.iterdir()) == sorted([*files, RECORD])
    assert all((output / name).stat().st_size > 0 for name in files)
    load = pd.read_csv(output / "masks_expert_load.csv", dtype={"domain": str})
    assert list(zip(load["domain"], load["role"], load["block"])) == [
        ("0", "test", 5),
        ("0", "test", 11),
        ("1", "source", 5),
        ("1", "source", 11),
        ("2", "source", 5),
        ("2", "source", 11),
    ]
    shares = load[[f"expert {e}" for e in range(4)]].sum(axis=1)
    assert (shares - 1).abs().max() < 1e-6
    assert (load["images"] == 3).all()  # each environment's held-out split
    assert "expert 3" in printed and "dropped" in printed


def test_sweep_files_run_sfmoe_on_the_papers_datasets_and_note_its_own_weights(
    empty_caches, capsys
):
    from dmg_domainbed.cli import main

    sweeps = Path(__file__).resolve().parents[3] / "sweeps"
    code = main(
        [
            "sweep",
            str(sweeps / "sfmoe_domainbed.toml"),
            "--data_dir",
            str(empty_caches),
            "--dry-run",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "960 job(s)" in out
    assert re.search(r"PACS +SFMOE", out) and re.search(r"TerraIncognita +SFMOE", out)
    assert "SFMOE's pretrained weights: deit_small_distilled_patch16_224 weights not found" in out
    # SFMOE loads none of DomainBed's backbones, and its cost is its own network's
    assert "resnet50 ImageNet weights" not in out and "ram_in1k" not in out
    assert "PACS: SFMOE's own network, fp32, 1 job(s) per GPU" in out
    # The authors' DomainNet runs: 15,001 steps, a checkpoint every 500.
    with open(sweeps / "sfmoe_domainnet.toml", "rb") as stream:
        domainnet = tomllib.load(stream)["sweep"]
    assert domainnet["algorithms"] == ["SFMOE"] and domainnet["datasets"] == ["DomainNet"]
    assert (domainnet["steps"], domainnet["checkpoint_freq"]) == (15001, 500)
