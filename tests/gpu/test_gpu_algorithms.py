"""The GPU lane for the algorithms: each plugin and ERM trained by DomainBed's ``train.py`` on CUDA.

``python -m pytest -m gpu`` runs the lane; without CUDA every test here is skipped. One short
run per algorithm (module scope) on a synthetic PACS folder with random pretrained weights
(ResNet-50 where DomainBed loads it, DeiT-S for SFMOE), shared by its checks: finite losses,
every parameter and buffer on the GPU, ``predict`` repeatable in eval mode, and ``evaluate``,
``select`` and ``masks`` giving the same numbers on the CPU (``CUDA_VISIBLE_DEVICES=``) as on
the GPU. TF32 is off for the commands run on the GPU (``NVIDIA_TF32_OVERRIDE=0``), so both sides
compute in float32 and agree within float tolerance.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from domainbed import algorithms, hparams_registry

from dmg_domainbed import synthetic
from dmg_domainbed.algorithms.corgrad.chunks import chunk_layout
from dmg_domainbed.algorithms.corgrad.corgrad import corrected_update
from dmg_domainbed.algorithms.sfmoe import weights as deit_weights
from dmg_domainbed.preflight.weights import needed_weights
from dmg_domainbed.weight_files import Caches

from ..helpers import domainbed_env, run_python

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA GPU: torch.cuda.is_available() is False",
    ),
]

ALGORITHMS = ("ERM", "Aggregate", "MultiHead", "DMG", "CorGrad", "ImportanceMask", "SFMOE")
STEPS, CHECKPOINT_FREQ = 3, 2  # checkpoints (and saved models) at steps 0 and 2
CLASSES, IMAGES_PER_DOMAIN, HOLDOUT_FRACTION, BATCH_SIZE = 2, 4, 0.5, 2
# ImportanceMask ends phase 1 after one step: the later steps and the saved model are phase 2.
ALGORITHM_HPARAMS = {
    "ImportanceMask": {"phase1_steps": 1, "freeze_step": 2, "unimportant_lr_half_life": 1}
}
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


@pytest.fixture(scope="module")
def pacs(tmp_path_factory):
    """A synthetic PACS folder and caches of random ResNet-50 and DeiT-S weights."""
    root = tmp_path_factory.mktemp("gpu_pacs")
    caches = Caches.under(root / "cache")
    resnet_hparams = hparams_registry.default_hparams("ERM", "PACS")
    files, problems = needed_weights(resnet_hparams, synthetic.IMAGE_SHAPE, caches)
    assert not problems, problems
    deit = root / "deit_small_distilled.pth"
    files += deit_weights.weight_locations(str(deit), caches)
    synthetic.write_random_weights(files)
    synthetic.write_image_dataset(
        "PACS", root / "data", images_per_domain=IMAGES_PER_DOMAIN, classes=CLASSES
    )
    environment = domainbed_env(**caches.environment(), HF_HUB_OFFLINE="1")
    return root, environment, {"sfmoe_weights": str(deit)}


def run(args: list[str], environment: dict, cwd: Path | None = None) -> str:
    """What ``python ARGS`` prints, run in a new interpreter (CUDA starts in it as in a user's)."""
    return run_python(*args, env=environment, cwd=cwd, timeout=900).stdout


def on_gpu(environment: dict) -> dict:
    return {**environment, "NVIDIA_TF32_OVERRIDE": "0"}


def on_cpu(environment: dict) -> dict:
    return {**environment, "CUDA_VISIBLE_DEVICES": ""}


@pytest.fixture(scope="module", params=ALGORITHMS)
def trained(request, pacs):
    """``(run folder, environment)`` of one algorithm trained on CUDA by DomainBed's train.py;
    the run folder is alone in its sweep folder, for ``select``."""
    root, environment, weights = pacs
    algorithm = request.param
    run_dir = root / "sweeps" / algorithm / "run"
    hparams = {"batch_size": BATCH_SIZE, **ALGORITHM_HPARAMS.get(algorithm, {})}
    if algorithm == "SFMOE":
        hparams |= weights
    run(
        [
            *("-m", "domainbed.scripts.train", "--algorithm", algorithm, "--dataset", "PACS"),
            *("--data_dir", str(root / "data"), "--output_dir", str(run_dir)),
            *("--steps", str(STEPS), "--checkpoint_freq", str(CHECKPOINT_FREQ)),
            *("--holdout_fraction", str(HOLDOUT_FRACTION), "--test_envs", "0"),
            *("--hparams", json.dumps(hparams), "--save_model_every_checkpoint"),
        ],
        environment,
    )
    assert (run_dir / "done").exists()
    return run_dir, environment


def test_training_on_cuda_logs_finite_losses(trained):
    run_dir, _ = trained
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, STEPS - 1]
    for record in records:
        assert math.isfinite(record["loss"]), record
        numbers = {k: v for k, v in record.items() if isinstance(v, float)}
        assert all(math.isfinite(v) for v in numbers.values()), numbers


def test_every_parameter_and_buffer_lives_on_the_gpu_and_predict_repeats(trained):
    run_dir, environment = trained
    probe = Path(__file__).with_name("probe_model.py")
    found = json.loads(run([str(probe), str(run_dir)], environment).splitlines()[-1])
    assert found["saved_off_gpu"] == [], "train.py saved tensors that were not on the GPU"
    assert found["off_gpu"] == [] and found["off_gpu_after_update"] == []
    assert found["update_finite"] and found["predict_finite"]
    assert found["predict_repeatable"]


def same_tables(gpu_dir: Path, cpu_dir: Path) -> None:
    """Every CSV written on the GPU has its CPU twin with the same numbers within tolerance."""
    tables = sorted(p.relative_to(gpu_dir) for p in gpu_dir.rglob("*.csv"))
    assert tables, f"nothing written under {gpu_dir}"
    assert tables == sorted(p.relative_to(cpu_dir) for p in cpu_dir.rglob("*.csv"))
    for name in tables:
        gpu, cpu = pd.read_csv(gpu_dir / name), pd.read_csv(cpu_dir / name)
        assert list(gpu.columns) == list(cpu.columns) and gpu.shape == cpu.shape, name
        numeric = gpu.select_dtypes("number").columns
        for column in gpu.columns:
            if column in numeric:
                assert torch.allclose(
                    torch.tensor(gpu[column].to_numpy(float)),
                    torch.tensor(cpu[column].to_numpy(float)),
                    equal_nan=True,
                    **TOLERANCE,
                ), (name, column)
            else:
                mine = gpu[column].astype(str).str.replace(str(gpu_dir), "OUT")
                theirs = cpu[column].astype(str).str.replace(str(cpu_dir), "OUT")
                assert mine.tolist() == theirs.tolist(), (name, column)


def on_both_devices(command: list[str], trained, name: str) -> None:
    run_dir, environment = trained
    outputs = {}
    for device, env in (("gpu", on_gpu(environment)), ("cpu", on_cpu(environment))):
        outputs[device] = run_dir.parent.parent / f"{run_dir.parent.name}_{name}_{device}"
        run(["-m", "dmg_domainbed", *command, "--output_dir", str(outputs[device])], env)
    same_tables(outputs["gpu"], outputs["cpu"])


def test_evaluate_reads_the_gpu_run_on_the_cpu_with_the_same_predictions(trained):
    run_dir, _ = trained
    on_both_devices(["evaluate", "--run_dir", str(run_dir)], trained, "evaluate")


def test_select_reads_the_gpu_checkpoints_on_the_cpu_with_the_same_predictions(trained):
    run_dir, _ = trained
    on_both_devices(["select", "--input_dir", str(run_dir.parent)], trained, "select")


def test_masks_reads_the_gpu_run_on_the_cpu_with_the_same_values(trained):
    run_dir, _ = trained
    algorithm = json.loads((run_dir / "results.jsonl").read_text().splitlines()[0])["args"]
    cls = algorithms.get_algorithm_class(algorithm["algorithm"])
    if not getattr(cls, "LEARNED_PICTURES", None):
        pytest.skip(f"{cls.__name__} draws nothing learned: `masks` has nothing to read")
    on_both_devices(["masks", "--run_dir", str(run_dir)], trained, "masks")


def test_corgrad_rule_repeats_to_the_bit_on_cuda():
    """Products, sums with a fixed reduction order and per-row weights: two calls on the same
    gradients give the same bits (a scatter-add with float atomics does not)."""
    layout = chunk_layout([(2048, 512, 3, 3), (1000, 2048), (64,)], 10, device="cuda")
    values = torch.randn(3, layout.num_elements, device="cuda")
    first, again = corrected_update(values, layout, 0.6), corrected_update(values, layout, 0.6)
    assert torch.equal(first[0], again[0])
    assert all(torch.equal(first[1][name], again[1][name]) for name in first[1])
