"""The pretrained weights a run loads follow DomainBed's networks.py, and the caches are looked
up where torch.hub and the Hugging Face hub look, without downloading."""

import pytest
from huggingface_hub import constants

from dmg_domainbed.preflight.weights import needed_weights

IMAGES = (3, 224, 224)


@pytest.fixture
def caches(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    return tmp_path


def names(files):
    return [f.filename for f in files]


def test_domainbed_defaults_load_torchvision_and_timm_weights(caches):
    files, problems = needed_weights({"resnet18": False, "resnet50_augmix": True}, IMAGES)
    assert problems == []
    assert names(files) == ["resnet50-0676ba61.pth", "snapshots/<revision>/model.safetensors"]
    assert files[0].folder == caches / "torch" / "hub" / "checkpoints"
    assert files[1].folder == caches / "hf" / "models--timm--resnet50.ram_in1k"
    assert not any(f.present for f in files)


def test_the_paper_s_resnet18_needs_only_torchvision_weights(caches):
    files, _ = needed_weights({"resnet18": True, "resnet50_augmix": False}, IMAGES)
    assert names(files) == ["resnet18-f37072fd.pth"]
    files[0].folder.mkdir(parents=True)
    files[0].path.write_bytes(b"")
    assert needed_weights({"resnet18": True, "resnet50_augmix": False}, IMAGES)[0][0].present


def test_a_cached_hugging_face_snapshot_is_found(caches):
    repo = caches / "hf" / "models--timm--resnet50.ram_in1k"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "model.safetensors").write_bytes(b"")
    files, _ = needed_weights({"resnet18": False, "resnet50_augmix": True}, IMAGES)
    assert [f.present for f in files] == [False, True]


def test_small_inputs_need_no_weights_and_vit_needs_dinov2(caches):
    assert needed_weights({"resnet50_augmix": True}, (64,)) == ([], [])
    assert needed_weights({"resnet50_augmix": True}, (3, 28, 28)) == ([], [])
    files, problems = needed_weights({"vit": True, "dinov2": False}, IMAGES)
    assert files == [] and "dinov2=true" in problems[0]
    files, _ = needed_weights({"vit": True, "dinov2": True}, IMAGES)
    assert names(files) == ["facebookresearch_dinov2_main", "dinov2_vitb14_pretrain.pth"]


def test_alexnet_needs_only_torchvisions_alexnet_weights(caches):
    # alexnet=true replaces DomainBed's ResNet: whatever resnet50_augmix says, no ResNet loads
    files, problems = needed_weights({"alexnet": True, "resnet50_augmix": True}, IMAGES)
    assert problems == [] and names(files) == ["alexnet-owt-7be5be79.pth"]
    assert files[0].folder == caches / "torch" / "hub" / "checkpoints" and not files[0].present
    assert "IMAGENET1K_V1" in files[0].what


def test_a_sweep_missing_only_weights_is_told_how_to_get_them_not_where_data_is(
    tmp_path, monkeypatch
):
    """The data is there, the ResNet-18 weights are not: the refusal names the file and the
    command that fetches it, and says nothing of the data or --data_dir."""
    from dmg_domainbed import synthetic
    from dmg_domainbed.errors import UserError
    from dmg_domainbed.sweep import config
    from dmg_domainbed.weight_files import Caches
    from tests.helpers import machine_check, read_weights_from

    read_weights_from(monkeypatch, Caches.under(tmp_path / "empty caches"))
    synthetic.write_image_dataset("PACS", tmp_path / "data", images_per_domain=7)
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(
        f'[sweep]\nalgorithms = ["ERM"]\ndatasets = ["PACS"]\noutput_dir = "{tmp_path / "out"}"\n'
        "[sweep.hparams]\nresnet18 = true\nresnet50_augmix = false\nbatch_size = 2\n"
    )
    sweep = config.resolve(config.load_sweep(sweep_file), str(tmp_path / "data"), None)
    with pytest.raises(UserError, match="the jobs would fail before their first step") as refused:
        machine_check(sweep)
    message = str(refused.value)
    assert "pretrained weights missing: torchvision resnet18 ImageNet weights" in message
    assert "to get it: TORCH_HOME=" in message
    assert "--data_dir" not in message and "the data" not in message
    assert not (tmp_path / "out").exists()
