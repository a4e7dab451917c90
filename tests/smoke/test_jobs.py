"""The smoke check's data and weights: a linked sample of a real dataset, synthetic stand-ins
only with --synthetic, and random weights only in a cache of its own."""

from pathlib import Path

import pytest
from huggingface_hub import constants

from dmg_domainbed import synthetic
from dmg_domainbed.preflight.weights import needed_weights
from dmg_domainbed.smoke import jobs
from dmg_domainbed.smoke.staging import RANDOM_WEIGHTS, SYNTHETIC_DATA, Staging, sample_image_folder
from dmg_domainbed.weight_files import Caches


@pytest.fixture
def user_caches(monkeypatch, tmp_path) -> Caches:
    """Empty caches standing for the user's."""
    caches = Caches.under(tmp_path / "user_cache")
    monkeypatch.setenv("TORCH_HOME", str(caches.torch_hub.parent))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(caches.hf_hub))
    return caches


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_sample_links_every_domain_and_class_and_enough_images(tmp_path):
    real = synthetic.write_image_dataset("PACS", tmp_path / "real", images_per_domain=21)
    before = files_under(real)
    sample_image_folder(real, tmp_path / "sample", per_domain=8)
    for domain in synthetic.LAYOUTS["PACS"].domains:
        classes = sorted(p.name for p in (tmp_path / "sample" / domain).iterdir())
        assert classes == sorted(synthetic.LAYOUTS["PACS"].classes)
        links = sorted((tmp_path / "sample" / domain).glob("*/*.jpg"))
        assert len(links) == 7 * 2  # ceil(8 / 7) per class
        assert all(p.is_symlink() and p.resolve().parent.parent.parent == real for p in links)
    assert files_under(real) == before


def test_without_synthetic_missing_data_and_weights_keep_the_job_from_running(
    user_caches, tmp_path
):
    (job,) = jobs.from_command_line(["ERM"], ["PACS"], {"resnet18": True, "resnet50_augmix": False})
    (staged,) = Staging(tmp_path / "scratch", str(tmp_path / "data")).stage([job])
    data_problem, weights_problem = staged.problems
    assert f"PACS data missing: not found: expected {tmp_path / 'data' / 'PACS'}/" in data_problem
    assert "download_pacs" in data_problem and "--synthetic" in data_problem
    expected = user_caches.torch_hub / "checkpoints" / "resnet18-f37072fd.pth"
    assert f"not found at {expected}; to get it: TORCH_HOME=" in weights_problem
    assert staged.stand_ins == [] and staged.environment == {}
    assert not (tmp_path / "user_cache").exists()


def test_stand_ins_go_to_the_check_s_own_cache_and_the_chosen_folder(user_caches, tmp_path):
    # The user has torchvision's ResNet-50 but not timm's resnet50.ram_in1k (DomainBed's default).
    hparams = {"resnet18": False, "resnet50_augmix": True}
    torchvision_file, timm_file = needed_weights(hparams, synthetic.IMAGE_SHAPE)[0]
    torchvision_file.folder.mkdir(parents=True)
    torchvision_file.path.write_bytes(b"the user's real weights")
    (job,) = jobs.from_command_line(["DMG"], ["PACS"], hparams)

    staging = Staging(tmp_path / "scratch", None, synthetic_data_dir=tmp_path / "synthetic")
    (staged,) = staging.stage([job])

    assert staged.problems == [] and staged.stand_ins == [SYNTHETIC_DATA, RANDOM_WEIGHTS]
    assert staged.data_dir == str(tmp_path / "synthetic")
    written = tmp_path / "synthetic" / "PACS"
    assert (written / synthetic.SYNTHETIC_MARKER).is_file()
    per_domain = synthetic.images_needed(32, 0.2, 7)  # DomainBed's batch 32, holdout 0.2
    assert len(list((written / "photo").glob("*/*.jpg"))) == per_domain

    ours = Caches.under(tmp_path / "scratch" / "random_weights")
    assert staged.environment == {**ours.environment(), "HF_HUB_OFFLINE": "1"}
    linked, random = needed_weights(hparams, synthetic.IMAGE_SHAPE, ours)[0]
    assert linked.path.resolve() == torchvision_file.path and linked.path.is_symlink()
    assert random.present and not timm_file.folder.exists()
    assert files_under(user_caches.torch_hub.parent) == {
        "hub/checkpoints/resnet50-0676ba61.pth": b"the user's real weights"
    }
    assert any(
        "stand in for the missing timm resnet50.ram_in1k weights" in note
        and str(timm_file.folder) in note
        for note in staging.notes
    )


def test_weights_that_cannot_be_made_up_keep_the_job_from_running(user_caches, tmp_path):
    hparams = {"vit": True, "dinov2": True}  # DINOv2 comes with torch.hub code of its own
    (job,) = jobs.from_command_line(["ERM"], ["PACS"], hparams)
    staging = Staging(tmp_path / "scratch", None, synthetic_data_dir=tmp_path / "synthetic")
    (staged,) = staging.stage([job])
    (problem,) = staged.problems
    assert "cannot write random weights for torch.hub code of facebookresearch/dinov2" in problem
    assert "torch.hub.load('facebookresearch/dinov2', 'dinov2_vitb14')" in problem
    assert RANDOM_WEIGHTS not in staged.stand_ins and staged.environment == {}


def test_an_algorithm_s_own_weights_get_random_stand_ins_where_it_loads_them(
    user_caches, tmp_path, monkeypatch
):
    """SFMOE loads DeiT-S itself (not DomainBed's featurizer): with --synthetic, random DeiT-S
    weights go where its own lookup finds them, in the check's cache, once for both jobs."""
    from dmg_domainbed.algorithms.sfmoe import network as sfmoe_network
    from dmg_domainbed.algorithms.sfmoe import weights as deit_weights

    without = Staging(tmp_path / "plain", None).stage(
        jobs.from_command_line(["SFMOE"], ["PACS"], {})
    )
    assert without[0].problems[-1].startswith("SFMOE's pretrained weights: deit_small_distilled")
    sfmoe_jobs = jobs.from_command_line(["SFMOE"], ["PACS", "VLCS"], {})
    staging = Staging(tmp_path / "scratch", None, synthetic_data_dir=tmp_path / "synthetic")
    staged = staging.stage(sfmoe_jobs)
    assert [s.problems for s in staged] == [[], []]
    assert all(s.stand_ins == [SYNTHETIC_DATA, RANDOM_WEIGHTS] for s in staged)
    assert sum("stand in for SFMOE's missing" in note for note in staging.notes) == 1
    assert not (tmp_path / "user_cache").exists()
    # What the job reads: its environment's cache, offline, holds weights SFMOE's network loads.
    environment = staged[0].environment
    assert environment["HF_HUB_OFFLINE"] == "1"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", environment["HF_HUB_CACHE"])
    monkeypatch.setenv("TORCH_HOME", environment["TORCH_HOME"])
    found = deit_weights.find_weights("")
    assert found is not None and found.is_relative_to(tmp_path / "scratch" / "random_weights")
    assert deit_weights.check_weights(
        {
            "sfmoe_pretrained": True,
            "sfmoe_weights": "",
            "sfmoe_blocks": [5, 11],
            "sfmoe_expert_init": "random",
        }
    ).ready
    network = sfmoe_network.create_backbone(7, pretrained=True)
    assert network.head.out_features == 7
