"""``dmg-domainbed data check`` on generated folders: a copy of PACS with the download's names
and counts passes, and each way a copy goes wrong gives its message, with what DomainBed
expects, before any job."""

import io
import shutil

import numpy as np
import pytest
from PIL import Image

from dmg_domainbed.datasets.check.data_check import Batch, check_dataset
from dmg_domainbed.datasets.findings import ERROR, WARNING
from dmg_domainbed.datasets.layouts import DOMAINNET_DUPLICATES_FILE, IMAGE_LAYOUTS

from ...helpers import cli

PACS = IMAGE_LAYOUTS["PACS"]


def write_copy(root, counts, classes, seed=0, side=8):
    """``counts[domain]`` small JPEGs per domain, spread over ``classes``, each of its own
    random pixels (no two files alike)."""
    rng = np.random.default_rng(seed)
    for domain, count in counts.items():
        for name in classes:
            (root / domain / name).mkdir(parents=True)
        pixels = rng.integers(0, 256, (count, side, side, 3), dtype=np.uint8)
        for i in range(count):
            folder = root / domain / classes[i % len(classes)]
            Image.fromarray(pixels[i]).save(folder / f"{i:05d}.jpg", quality=90)
    return root


@pytest.fixture(scope="module")
def pacs_copy(tmp_path_factory):
    """A data_dir holding PACS with the download's folder names and image counts (9,991)."""
    data_dir = tmp_path_factory.mktemp("pacs_copy")
    write_copy(data_dir / "PACS", PACS.releases[0].per_domain, PACS.classes)
    return data_dir


@pytest.fixture
def small_pacs(tmp_path):
    """A PACS-shaped data_dir with two images per class (its counts are no release's)."""
    write_copy(tmp_path / "PACS", dict.fromkeys(PACS.domains, 14), PACS.classes, side=64)
    return tmp_path


def messages(report, severity=ERROR):
    return [str(f) for f in report.findings if f.severity == severity]


def one(report, text, severity=ERROR):
    found = [m for m in messages(report, severity) if text in m]
    assert len(found) == 1, f"{text!r} not in one {severity} of:\n" + "\n".join(
        map(str, report.findings)
    )
    return found[0]


def test_a_correct_pacs_copy_passes_quick_and_full(pacs_copy):
    for quick in (["--quick"], []):
        code, out, _ = cli("data", "check", "--data_dir", str(pacs_copy), *quick)
        assert code == 0, out
        assert "image counts match PACS as DomainBed downloads it" in out
        assert "Li, Yang, Song and Hospedales" in out  # the figures' source
        assert "READY: every dataset checked is ok" in out
    assert "9,991 of 9,991 images decoded" in out


def test_a_missing_class_is_named_with_why_and_the_fix(small_pacs):
    shutil.rmtree(small_pacs / "PACS" / "photo" / "giraffe")
    code, out, _ = cli("data", "check", "--data_dir", str(small_pacs), "--quick")
    assert code == 1
    message = f"domain folder {small_pacs / 'PACS' / 'photo'}: no images of class(es) 'giraffe'"
    assert message in out
    assert "so the classes after a missing or extra one get other labels" in out
    assert f"download_pacs('{small_pacs}')" in out
    assert "NOT READY" in out


def test_an_empty_class_folder_would_stop_the_job(small_pacs):
    for image in (small_pacs / "PACS" / "sketch" / "house").iterdir():
        image.unlink()
    report = check_dataset("PACS", small_pacs, quick=True)
    message = one(
        report, f"domain folder {small_pacs / 'PACS' / 'sketch'}: no images of class(es) 'house'"
    )
    assert "ImageFolder stops the job on an empty one" in message


def test_image_counts_are_compared_with_the_release(small_pacs):
    report = check_dataset("PACS", small_pacs, quick=True)
    message = one(report, "56 images (art_painting 14, cartoon 14, photo 14, sketch 14)")
    assert "expected 9,991 in PACS as DomainBed downloads it" in message
    assert "(art_painting 2,048, cartoon 2,344, photo 1,670, sketch 3,929)" in message
    assert "images are missing" in message


def test_a_truncated_jpeg_is_found_by_decoding(small_pacs):
    image = small_pacs / "PACS" / "cartoon" / "dog" / "00000.jpg"
    image.write_bytes(image.read_bytes()[:-40])
    assert not [
        m for m in messages(check_dataset("PACS", small_pacs, quick=True)) if "is truncated" in m
    ]
    report = check_dataset("PACS", small_pacs, quick=False, workers=2)
    message = one(report, f"1 file(s) are truncated: {image} (")
    assert "DomainBed decodes a truncated one with its missing part filled in" in message


def test_a_file_that_is_no_image_would_stop_the_job(small_pacs):
    bad = small_pacs / "PACS" / "photo" / "horse" / "broken.jpg"
    bad.write_bytes(b"<html>quota exceeded</html>")
    report = check_dataset("PACS", small_pacs, quick=False)
    message = one(report, f"cannot be decoded: {bad} (not an image file Pillow can identify)")
    assert "the job stops at the first batch that draws it" in message


def test_cmyk_and_16_bit_images_are_named(small_pacs):
    rng = np.random.default_rng(1)
    cmyk = small_pacs / "PACS" / "sketch" / "dog" / "cmyk.jpg"
    Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).convert("CMYK").save(cmyk)
    deep = small_pacs / "PACS" / "sketch" / "dog" / "deep.png"
    Image.fromarray(rng.integers(0, 65536, (8, 8), dtype=np.uint16)).save(deep)
    report = check_dataset("PACS", small_pacs, quick=False)
    assert "without its colour profile" in one(report, f"1 file(s) in mode CMYK: {cmyk}")
    assert "clipping at 255" in one(report, f"1 file(s) in mode I (16- or 32-bit integers): {deep}")


def test_a_file_copied_into_another_domain_is_found(small_pacs):
    original = small_pacs / "PACS" / "art_painting" / "horse" / "00004.jpg"
    copy = small_pacs / "PACS" / "sketch" / "horse" / "copy.jpg"
    shutil.copy(original, copy)
    report = check_dataset("PACS", small_pacs, quick=False)
    one(report, f"same content in several domains: {original}, {copy}", WARNING)


def test_a_domain_named_as_another_copy_names_it_is_named_with_the_layout_expected(tmp_path):
    """VLCS's 'VOC2007' named 'PASCAL', as other copies name it, sorts before 'SUN09': every
    --test_envs after it would name another domain."""
    vlcs = IMAGE_LAYOUTS["VLCS"]
    write_copy(tmp_path / "VLCS", dict.fromkeys(vlcs.domains, 5), vlcs.classes)
    (tmp_path / "VLCS" / "VOC2007").rename(tmp_path / "VLCS" / "PASCAL")
    report = check_dataset("VLCS", tmp_path, quick=True)
    message = one(report, "folder 'PASCAL' in")
    assert "'PASCAL' would be domain 2 (--test_envs 2)" in message
    assert "with 4 domain folders (Caltech101, LabelMe, SUN09, VOC2007) only" in message
    one(report, f"no folder of domain 'VOC2007' in {tmp_path / 'VLCS'}")


def test_a_domain_named_otherwise_at_its_own_place_is_only_warned_of(small_pacs):
    """'art' sorts where 'art_painting' does: DomainBed trains on the same domains, so the
    copy is usable, its classes and counts checked as art_painting's."""
    root = small_pacs / "PACS"
    (root / "art_painting").rename(root / "art")
    report = check_dataset("PACS", small_pacs, quick=True, batch=None)  # batches not looked at
    message = one(report, f"folder 'art' in {root} stands where domain 'art_painting'", WARNING)
    assert "'art' is domain 0 (--test_envs 0)" in message
    assert "rename it 'art_painting'" in message
    assert not [m for m in messages(report) if "domain" in m and "count" not in m]


def test_a_class_renamed_alike_in_every_domain_is_only_warned_of(small_pacs):
    """Every domain's 'dog' folder named 'dogs': it sorts where 'dog' does in each domain, so
    DomainBed numbers the classes as it numbers the download's and the run trains the same,
    under another class name. Renamed in some domains only, the labels differ: an error."""
    root = small_pacs / "PACS"
    for domain in PACS.domains:
        (root / domain / "dog").rename(root / domain / "dogs")
    report = check_dataset("PACS", small_pacs, quick=True, batch=None)  # batches not looked at
    message = one(report, f"class folder(s) 'dogs' for 'dog' in every domain of {root}", WARNING)
    assert "the same labels under other names" in message
    assert "rename them to match the download" in message
    assert not [m for m in messages(report) if "class(es)" in m or "class folder" in m]
    (root / "photo" / "dogs").rename(root / "photo" / "dog")
    report = check_dataset("PACS", small_pacs, quick=True, batch=None)
    one(report, f"domain folder {root / 'sketch'}: no images of class(es) 'dog'")
    assert not report.warnings


def test_a_folder_that_is_no_domain_shifts_the_test_envs(small_pacs):
    (small_pacs / "PACS" / "__MACOSX" / "art_painting").mkdir(parents=True)
    report = check_dataset("PACS", small_pacs, quick=True)
    message = one(report, "folder '__MACOSX' in")
    assert "'__MACOSX' would be domain 0 (--test_envs 0)" in message
    assert "move it out of the dataset" in message


def test_domainnet_duplicates_that_domainbed_s_download_deletes(tmp_path):
    import domainbed

    listed = f"{domainbed.__path__[0]}/{DOMAINNET_DUPLICATES_FILE}"
    with open(listed) as stream:
        first = stream.readline().strip()  # clipart/<class>/<file>.jpg
    layout = IMAGE_LAYOUTS["DomainNet"]
    root = write_copy(tmp_path / "domain_net", dict.fromkeys(layout.domains, 1), layout.classes)
    (root / first).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(next((root / "clipart").rglob("*.jpg")), root / first)
    report = check_dataset("DomainNet", tmp_path, quick=True)
    message = one(report, "1 of the 9,431 files DomainBed's download deletes are in")
    assert f"without the files listed in {listed}" in message


def test_names_are_checked_before_any_work(tmp_path):
    code, _, err = cli("data", "check", "--data_dir", str(tmp_path), "--datasets", "PCAS")
    assert code == 2 and "no check for dataset(s) PCAS; datasets with files:" in err
    code, _, err = cli("data", "check", "--data_dir", str(tmp_path / "nowhere"))
    assert code == 2 and "no such folder" in err
    code, _, err = cli("data", "check", "--data_dir", str(tmp_path))
    assert code == 2 and "no DomainBed dataset under --data_dir" in err


def write_camelyon(data_dir, patches_per_hospital=2):
    """A WILDS Camelyon17 v1.0 release in miniature: the marker, metadata.csv, PNG patches."""
    release = data_dir / "camelyon17_v1.0"
    (release / "patches").mkdir(parents=True)
    (release / "RELEASE_v1.0.txt").write_text("")
    rows = [",node,patient,x_coord,y_coord,tumor,slide,center,split"]
    for center in range(5):
        for k in range(patches_per_hospital):
            i = len(rows) - 1
            patient = f"{center:03d}"
            rows.append(f"{i},0,{patient},{k},0,{k % 2},{center},{center},0")
            folder = release / "patches" / f"patient_{patient}_node_0"
            folder.mkdir(exist_ok=True)
            pixels = np.full((96, 96, 3), i, dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"patch_patient_{patient}_node_0_x_{k}_y_0.png")
    (release / "metadata.csv").write_text("\n".join(rows) + "\n")
    return release


def test_a_wilds_release_is_read_through_the_wilds_package(tmp_path):
    release = write_camelyon(tmp_path)
    report = check_dataset("WILDSCamelyon", tmp_path, quick=False, batch=Batch(2))
    assert report.ok, report.findings
    assert [(c.domain, c.images) for c in report.counts] == [(f"hospital_{h}", 2) for h in range(5)]
    assert report.decoded == 10
    next((release / "patches").rglob("*.png")).unlink()
    report = check_dataset("WILDSCamelyon", tmp_path, quick=True)
    assert "an image for each of the metadata's 10 rows: 1 are missing" in one(report, "9 files")


def test_a_release_known_by_its_total_only(tmp_path):
    """TerraIncognita as DomainBed's download.py makes it since 2021 has 24,330 images; only
    that total is published. The quick check reads headers only: one tiny JPEG's bytes stand
    in for every image."""
    layout = IMAGE_LAYOUTS["TerraIncognita"]
    root = tmp_path / "terra_incognita"
    encoded = io.BytesIO()
    Image.new("RGB", (1, 1)).save(encoded, "JPEG")
    for domain, count in zip(layout.domains, (4_741, 9_736, 3_970, 5_883)):
        for name in layout.classes:
            (root / domain / name).mkdir(parents=True)
        for i in range(count):
            path = root / domain / layout.classes[i % len(layout.classes)] / f"{i}.jpg"
            path.write_bytes(encoded.getvalue())
    report = check_dataset("TerraIncognita", tmp_path, quick=True)
    assert report.ok, report.findings
    one(report, "image counts match TerraIncognita of DomainBed's download.py since 2021", "info")
    assert all(count.expected is None for count in report.counts)  # no per-domain figures
    (root / "location_38" / "bird" / "0.jpg").unlink()
    message = one(check_dataset("TerraIncognita", tmp_path, quick=True), "24,329 images")
    assert "24,788 in TerraIncognita of DomainBed's paper" in message
    assert "; or 24,330 in TerraIncognita of DomainBed's download.py since 2021" in message
