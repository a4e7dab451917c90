"""Dataset folders are found where DomainBed's datasets.py opens them, and only looked at."""

from dmg_domainbed.preflight.data import (
    INVALID,
    MISSING,
    NOT_CHECKED,
    NOT_NEEDED,
    PRESENT,
    SYNTHETIC_MARKER,
    dataset_status,
)


def make_domains(root, domains, classes=("dog",)):
    for domain in domains:
        for cls in classes:
            (root / domain / cls).mkdir(parents=True)


def test_image_folder_dataset_needs_one_folder_per_domain(tmp_path):
    make_domains(tmp_path / "PACS", ["art_painting", "cartoon", "photo", "sketch"])
    found = dataset_status("PACS", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == PRESENT and found.ok


def test_missing_or_incomplete_folders_say_what_is_expected_and_how_to_get_it(tmp_path):
    download = (
        'python -c "from domainbed.scripts.download import download_office_home; '
        f"download_office_home('{tmp_path}')\""
    )
    found = dataset_status("OfficeHome", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == MISSING and str(tmp_path / "office_home") in found.detail
    assert download in found.detail
    make_domains(tmp_path / "office_home", ["Art", "Clipart", "Product"])
    found = dataset_status("OfficeHome", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == INVALID and not found.ok and "3 folder(s)" in found.detail
    assert download in found.detail
    (tmp_path / "office_home" / "Real World").mkdir()
    found = dataset_status("OfficeHome", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == INVALID and "no class folders in Real World" in found.detail


def test_domains_with_different_class_folders_would_be_mislabelled(tmp_path):
    make_domains(tmp_path / "VLCS", ["Caltech101", "LabelMe", "SUN09"], ["bird", "car"])
    make_domains(tmp_path / "VLCS", ["VOC2007"], ["bird", "chair"])
    found = dataset_status("VLCS", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == INVALID
    assert "Caltech101 and VOC2007 have different class folders (car, chair)" in found.detail


def test_a_synthetic_folder_says_so(tmp_path):
    make_domains(tmp_path / "PACS", ["art_painting", "cartoon", "photo", "sketch"])
    assert "SYNTHETIC" not in dataset_status("PACS", "domainbed.datasets", 4, str(tmp_path)).detail
    (tmp_path / "PACS" / SYNTHETIC_MARKER).write_text("")
    found = dataset_status("PACS", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == PRESENT and "SYNTHETIC: random images, not the dataset" in found.detail


def test_mnist_needs_torchvision_s_raw_files(tmp_path):
    assert dataset_status("RotatedMNIST", "domainbed.datasets", 6, str(tmp_path)).state == MISSING
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        (raw / name).write_bytes(b"")
    assert dataset_status("RotatedMNIST", "domainbed.datasets", 6, str(tmp_path)).state == PRESENT


def test_wilds_needs_its_release_marker(tmp_path):
    assert dataset_status("WILDSCamelyon", "domainbed.datasets", 5, str(tmp_path)).state == MISSING
    (tmp_path / "camelyon17_v1.0").mkdir()
    (tmp_path / "camelyon17_v1.0" / "RELEASE_v1.0.txt").write_text("")
    assert dataset_status("WILDSCamelyon", "domainbed.datasets", 5, str(tmp_path)).state == PRESENT


def test_embedded_and_unknown_datasets(tmp_path):
    embedded = dataset_status("RotatedDigits", "dmg_domainbed.datasets.rotated_digits", 4, None)
    assert embedded.state == NOT_NEEDED and embedded.ok
    assert dataset_status("Debug28", "domainbed.datasets", 3, None).state == NOT_NEEDED
    other = dataset_status("Theirs", "their_package.data", 3, str(tmp_path))
    assert other.state == NOT_CHECKED and other.ok


def test_no_data_dir_for_a_dataset_with_files():
    found = dataset_status("PACS", "domainbed.datasets", 4, None)
    assert not found.ok and "--data_dir" in found.detail
