"""Dataset folders are found where DomainBed's datasets.py opens them, and only looked at."""

from dmg_domainbed.preflight.data import MISSING, NOT_CHECKED, NOT_NEEDED, PRESENT, dataset_status


def make_domains(root, domains, classes=("dog",)):
    for domain in domains:
        for cls in classes:
            (root / domain / cls).mkdir(parents=True)


def test_image_folder_dataset_needs_one_folder_per_domain(tmp_path):
    make_domains(tmp_path / "PACS", ["art_painting", "cartoon", "photo", "sketch"])
    found = dataset_status("PACS", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == PRESENT and found.ok


def test_missing_or_incomplete_folders_say_what_is_expected(tmp_path):
    found = dataset_status("OfficeHome", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == MISSING and str(tmp_path / "office_home") in found.detail
    make_domains(tmp_path / "office_home", ["Art", "Clipart", "Product"])
    found = dataset_status("OfficeHome", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == MISSING and "3 folder(s)" in found.detail
    (tmp_path / "office_home" / "Real World").mkdir()
    found = dataset_status("OfficeHome", "domainbed.datasets", 4, str(tmp_path))
    assert found.state == MISSING and "no class folders in Real World" in found.detail


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
