"""The data state the doctor, the sweep preflight and smoke give: the quick data check (names,
counts and headers, nothing decoded) summed up, each problem with the layout expected (and, for a
missing dataset, the command that downloads it)."""

import io
import struct

import pytest
from PIL import Image

from dmg_domainbed.datasets.check.mnist_check import mnist_files
from dmg_domainbed.datasets.layouts import IMAGE_LAYOUTS, MNIST_SIDE, SYNTHETIC_MARKER
from dmg_domainbed.errors import UserError
from dmg_domainbed.preflight import doctor, environment
from dmg_domainbed.preflight.data import (
    INVALID,
    MISSING,
    NOT_CHECKED,
    NOT_NEEDED,
    PRESENT,
    dataset_status,
)
from dmg_domainbed.sweep import config
from tests.helpers import fresh_process_that_registers_erm_and_pacs, machine_check


def tiny_jpeg() -> bytes:
    encoded = io.BytesIO()
    Image.new("RGB", (8, 8), (90, 120, 30)).save(encoded, "JPEG")
    return encoded.getvalue()


def make_domains(root, domains, classes=("dog",), per_class=1):
    image = tiny_jpeg()
    for domain in domains:
        for cls in classes:
            (root / domain / cls).mkdir(parents=True)
            for i in range(per_class):
                (root / domain / cls / f"{i}.jpg").write_bytes(image)


def test_missing_or_incomplete_folders_say_what_is_expected_and_how_to_get_it(tmp_path):
    download = (
        'python -c "from domainbed.scripts.download import download_office_home; '
        f"download_office_home('{tmp_path}')\""
    )
    found = dataset_status("OfficeHome", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == MISSING and not found.ok
    assert f"expected {tmp_path / 'office_home'}/ with 4 domain folders" in found.detail
    assert download in found.detail
    make_domains(tmp_path / "office_home", ["Art", "Clipart", "Product"])
    found = dataset_status("OfficeHome", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == INVALID and not found.ok
    assert f"no folder of domain 'Real World' in {tmp_path / 'office_home'}" in found.detail
    assert download in found.detail
    assert found.problems and all(p in found.detail for p in found.problems)


def test_domains_with_different_class_folders_would_be_mislabelled(tmp_path):
    classes = IMAGE_LAYOUTS["VLCS"].classes
    make_domains(tmp_path / "VLCS", ["Caltech101", "LabelMe", "SUN09"], classes)
    make_domains(tmp_path / "VLCS", ["VOC2007"], [c for c in classes if c != "car"])
    found = dataset_status("VLCS", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == INVALID
    assert f"domain folder {tmp_path / 'VLCS' / 'VOC2007'}: no images of class(es) 'car'" in (
        found.detail
    )
    assert "the classes after a missing or extra one get other labels" in found.detail


def test_a_synthetic_folder_says_so_and_is_not_held_to_the_download_s_counts(tmp_path):
    make_domains(tmp_path / "PACS", ["art_painting", "cartoon", "photo", "sketch"])
    found = dataset_status("PACS", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == INVALID and "the counts of no published release" in found.detail
    (tmp_path / "PACS" / SYNTHETIC_MARKER).write_text("")
    found = dataset_status("PACS", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == PRESENT and "SYNTHETIC: random images, not the dataset" in found.detail


def write_mnist(raw, truncate=0):
    raw.mkdir(parents=True)
    for name in mnist_files():
        items = 60_000 if name.startswith("train") else 10_000
        if "images" in name:
            header = struct.pack(">IIII", 2051, items, MNIST_SIDE, MNIST_SIDE)
            size = items * MNIST_SIDE * MNIST_SIDE
        else:
            header, size = struct.pack(">II", 2049, items), items
        with open(raw / name, "wb") as stream:
            stream.write(header)
            stream.truncate(len(header) + size - truncate)  # zeros, without writing them


def test_mnist_needs_torchvision_s_raw_files_whole(tmp_path):
    found = dataset_status("RotatedMNIST", "domainbed.datasets", 6, str(tmp_path))
    assert found.state == MISSING and "download_mnist" in found.detail
    write_mnist(tmp_path / "MNIST" / "raw")
    assert dataset_status("RotatedMNIST", "domainbed.datasets", 6, str(tmp_path)).state == PRESENT
    write_mnist(tmp_path / "cut" / "MNIST" / "raw", truncate=100)
    found = dataset_status("ColoredMNIST", "domainbed.datasets", 3, str(tmp_path / "cut"))
    assert found.state == INVALID and "where its header needs" in found.detail


def test_wilds_needs_its_release_marker(tmp_path):
    found = dataset_status("WILDSCamelyon", "domainbed.datasets", 5, str(tmp_path))
    assert found.state == MISSING
    assert (
        f"not found: expected {tmp_path / 'camelyon17_v1.0' / 'RELEASE_v1.0.txt'}" in found.detail
    )
    assert "Camelyon17Dataset(root_dir=" in found.detail


def test_embedded_and_unknown_datasets(tmp_path):
    embedded = dataset_status("RotatedDigits", "dmg_domainbed.datasets.rotated_digits", 4, None)
    assert embedded.state == NOT_NEEDED and embedded.ok
    assert dataset_status("Debug28", "domainbed.datasets", 3, None).state == NOT_NEEDED
    other = dataset_status("Theirs", "their_package.data", 3, str(tmp_path))
    assert other.state == NOT_CHECKED and other.ok
    # A DomainBed whose PACS has other domains than the layout this check knows.
    changed = dataset_status("PACS", "domainbed.datasets", 5, str(tmp_path))
    assert changed.state == NOT_CHECKED and "5 domains, not 4" in changed.detail


def test_no_data_dir_for_a_dataset_with_files():
    found = dataset_status("PACS", "domainbed.datasets", 4, None)
    assert not found.ok and "--data_dir" in found.detail


def test_the_sweep_preflight_and_the_doctor_name_a_broken_copy_before_any_job(
    tmp_path, monkeypatch
):
    layout = IMAGE_LAYOUTS["PACS"]
    make_domains(tmp_path / "data" / "PACS", layout.domains, layout.classes)
    (tmp_path / "data" / "PACS" / "photo" / "giraffe" / "0.jpg").unlink()
    (tmp_path / "data" / "PACS" / "photo" / "giraffe").rmdir()
    expected = f"domain folder {tmp_path / 'data' / 'PACS' / 'photo'}: no images of class"
    sweep_file = tmp_path / "sweep.toml"
    output = tmp_path / "sweep"
    sweep_file.write_text(
        f'[sweep]\nalgorithms = ["ERM"]\ndatasets = ["PACS"]\noutput_dir = "{output}"\n'
    )
    sweep = config.resolve(config.load_sweep(sweep_file), str(tmp_path / "data"), None)
    with pytest.raises(UserError, match="the jobs would fail before their first step") as refused:
        machine_check(sweep)
    assert expected in str(refused.value) and not output.exists()

    registered = fresh_process_that_registers_erm_and_pacs()
    monkeypatch.setattr(environment, "probe_fresh_process", lambda: registered)
    checks = doctor.diagnose("ERM", "PACS", str(tmp_path / "data"), {})
    (data,) = [check for check in checks if check.title == "data"]
    assert data.status == doctor.FAIL and data.details[0] == "PACS: not usable:"
    assert any(line.startswith(expected) for line in data.details[1:])


def test_the_sweep_preflight_refuses_domains_that_cannot_fill_the_largest_batch(tmp_path):
    """A synthetic PACS of 35 images a domain trains on 28: fewer than DomainBed's default batch
    of 32 (hparams seed 0) and the batches its random search draws for the other seeds; each
    job would hang in DomainBed's drop_last loader. A sweep that fixes batch_size 8 can run."""
    layout = IMAGE_LAYOUTS["PACS"]
    data = tmp_path / "data"
    make_domains(data / "PACS", layout.domains, layout.classes[:5], per_class=7)
    (data / "PACS" / SYNTHETIC_MARKER).write_text("")
    sweep_file = tmp_path / "sweep.toml"
    text = (
        '[sweep]\nalgorithms = ["ERM"]\ndatasets = ["PACS"]\nn_hparams = 4\nn_trials = 2\n'
        f'output_dir = "{tmp_path / "sweep"}"\n'
    )
    sweep_file.write_text(text)
    sweep = config.resolve(config.load_sweep(sweep_file), str(data), None)
    with pytest.raises(UserError, match="the jobs would fail before their first step") as refused:
        machine_check(sweep)
    message = str(refused.value)
    for domain in layout.domains:
        assert f"domain {domain!r} of PACS trains on 28 images (35 less 7 held out" in message
    assert "(the largest that the sweep's jobs of ERM draw)" in message
    assert message.count("lower the hparam batch_size to at most 28") == 1
    # one line per domain
    assert len([line for line in message.splitlines() if "of PACS trains on 28" in line]) == 4
    sweep_file.write_text(text + "[sweep.hparams]\nbatch_size = 8\n")
    sweep = config.resolve(config.load_sweep(sweep_file), str(data), None)
    try:
        machine_check(sweep)
    except UserError as error:  # for other reasons only, e.g. no pretrained weights here
        assert "batch" not in str(error)
    assert not (tmp_path / "sweep").exists()
