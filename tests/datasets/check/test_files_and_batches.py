"""What the data check finds in a folder of domains beyond names and counts: file headers
(quick), folders it cannot read, links that multiply a class, palette transparency, domains too
small for a batch, and long findings told in a line."""

import contextlib
import errno
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from domainbed import hparams_registry
from PIL import Image

from dmg_domainbed.datasets.check.data_check import Batch, check_dataset
from dmg_domainbed.datasets.findings import ERROR, WARNING
from dmg_domainbed.datasets.manifest import load_manifest
from dmg_domainbed.datasets.manifest_dataset import dataset_class
from dmg_domainbed.errors import UserError

from ...helpers import cli
from ..conftest import write_domains


def dataset(folder, per_class=20, classes=("cat", "dog")):
    """A manifest dataset of three domains (40 images a domain by default: one batch of 32 to
    train on) and its manifest file."""
    write_domains(folder / "images", classes=classes, per_class=per_class)
    manifest = folder / "mine.toml"
    manifest.write_text('name = "Mine"\nroot = "images"\n')
    return manifest


def check(manifest, quick=True, **batch):
    loaded = load_manifest(manifest)
    return check_dataset("Mine", None, quick, manifests={"Mine": loaded}, **batch)


def messages(report, severity=ERROR):
    return [str(f) for f in report.findings if f.severity == severity]


def test_a_domain_that_cannot_fill_a_batch_would_hang_the_job(tmp_path):
    """3 domains x 3 classes x 12 images: 36 a domain, 29 after DomainBed holds out 20%, fewer
    than DomainBed's default batch of 32; its loader drops the incomplete batch for ever."""
    manifest = dataset(tmp_path, per_class=12, classes=("cat", "dog", "owl"))
    report = check(manifest)
    assert not report.ok
    for domain in ("north", "south", "west"):
        (message,) = [m for m in messages(report) if f"domain {domain!r} of Mine trains" in m]
        assert message.startswith(
            f"domain {domain!r} of Mine trains on 29 images (36 less 7 held out, "
            "holdout_fraction 0.2): fewer than one batch of 32 (DomainBed's default batch_size)"
        )
    # Why and the fix once, not once per domain
    (fix,) = [m for m in messages(report) if "lower the hparam batch_size to at most 29" in m]
    assert "or give each of these domains at least 39 images" in fix
    assert sum("drops an incomplete batch" in m for m in messages(report)) == 1
    assert check(manifest, batch=Batch(16)).ok
    code, out, _ = cli("data", "check", "--manifest", str(manifest), "--quick")
    assert code == 1 and "fewer than one batch of 32" in out and "NOT READY" in out
    assert out.count("lower the hparam batch_size") == 1
    assert len([line for line in out.splitlines() if "fewer than one batch" in line]) == 3


def test_quick_reads_each_file_s_header(tmp_path):
    manifest = dataset(tmp_path)
    assert check(manifest).ok
    dog = tmp_path / "images" / "south" / "dog"
    (dog / "empty.png").write_bytes(b"")
    (dog / "page.jpg").write_text("<html>quota exceeded</html>")
    (dog / "._0.png").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        ")
    os.replace(dog / "1.png", dog / "1.jpg")  # a PNG named .jpg: Pillow reads it by content
    report = check(manifest)
    found = messages(report)
    assert any(f"1 file(s) are empty (0 bytes): {dog / 'empty.png'}" in m for m in found)
    (apple,) = [m for m in found if "AppleDouble" in m]
    assert f": {dog / '._0.png'};" in apple
    (text,) = [m for m in found if "are not images" in m]
    assert str(dog / "page.jpg") in text and "1.jpg" not in text
    assert len(found) == 3, found
    code, out, _ = cli("data", "check", "--manifest", str(manifest), "--quick")
    assert code == 1 and "NOT READY" in out


@contextlib.contextmanager
def unreadable(folder, monkeypatch):
    """``folder`` unreadable while the block runs: mode 000, or, where this process is root (whom
    modes do not stop, as in CI), ``os.scandir`` of it raising the PermissionError the system
    gives others."""
    if os.geteuid() != 0:
        folder.chmod(0)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    real, target = os.scandir, os.path.realpath(folder)

    def scandir(path="."):
        if os.path.realpath(path) == target:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real(path)

    with monkeypatch.context() as patch:
        patch.setattr(os, "scandir", scandir)
        yield


@pytest.mark.parametrize("folder", ["images/south", "images/south/dog"])
def test_an_unreadable_folder_of_a_manifest_dataset_is_named(tmp_path, monkeypatch, folder):
    manifest = dataset(tmp_path)
    with unreadable(tmp_path / folder, monkeypatch):
        code, out, _ = cli("data", "check", "--manifest", str(manifest), "--quick")
    assert code == 1
    assert f"{tmp_path / folder} (Permission denied)" in out
    assert "cannot be read" in out and "Let this user read them" in out


def test_an_unreadable_dataset_folder_is_named(tmp_path, monkeypatch):
    write_domains(tmp_path / "PACS", domains=("art_painting",), per_class=1)
    with unreadable(tmp_path / "PACS", monkeypatch):
        code, out, _ = cli("data", "check", "--data_dir", str(tmp_path), "--quick")
    assert code == 1
    assert f"folder {tmp_path / 'PACS'} cannot be read (Permission denied)" in out


def test_a_link_back_to_its_own_folder_multiplies_a_class(tmp_path):
    manifest = dataset(tmp_path)
    link = tmp_path / "images" / "south" / "dog" / "loop"
    link.symlink_to(".")
    report = check(manifest)
    (message,) = [m for m in messages(report) if str(link) in m]
    assert f"link {link} points back to {link.parent}" in message
    assert "reads each of the 20 image(s) below it 41 times" in message
    assert "Remove the link" in message
    assert not report.ok


def test_a_palette_image_with_transparency_is_warned_like_rgba(tmp_path):
    manifest = dataset(tmp_path)
    cat = tmp_path / "images" / "north" / "cat"
    Image.new("RGBA", (8, 8), (9, 9, 9, 0)).save(cat / "rgba.png")
    palette = Image.new("P", (8, 8))
    palette.putpalette([0, 0, 0, 255, 0, 0] * 128)
    palette.save(cat / "palette.png", transparency=0)
    report = check(manifest, quick=False)
    (rgba,) = [m for m in messages(report, WARNING) if "mode RGBA" in m]
    (transparent,) = [m for m in messages(report, WARNING) if "mode P+transparency" in m]
    assert str(cat / "palette.png") in transparent
    assert rgba.split("; ", 1)[1] == transparent.split("; ", 1)[1]  # the same effect and fix


def test_many_copies_are_one_short_finding_with_a_count(tmp_path):
    manifest = dataset(tmp_path)
    pixels = np.random.default_rng(5).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    copies = []
    for name in ("cat", "dog"):
        for i in range(15):
            copies.append(tmp_path / "images" / "west" / name / f"copy{i:02d}.png")
            Image.fromarray(pixels).save(copies[-1])
    report = check(manifest, quick=False)
    (message,) = [m for m in messages(report, WARNING) if "same content" in m]
    assert message.startswith("30 files of same content in several classes: ")
    assert "and 25 more" in message and message.count(".png") == 5
    assert len(message) < 2_000


def test_csv_paths_that_leave_the_root_are_refused_and_never_read(tmp_path):
    """A relative path climbing out with ``../`` and an absolute path to a system file: neither
    is the dataset's; the rows are named, and neither file is read."""
    root = write_domains(tmp_path / "data" / "images", domains=("a", "b"), per_class=20)
    system = tmp_path / "system.conf"
    system.write_text("secret = 1\n")
    Image.new("RGB", (8, 8)).save(tmp_path / "elsewhere.png")
    rows = ["path,label,domain"]
    rows += [f"{d}/{c}/{i}.png,{c},{d}" for d in "ab" for c in ("cat", "dog") for i in range(20)]
    rows += ["../../elsewhere.png,cat,a", f"{system},dog,b", "a/cat/../../../../system.conf,cat,b"]
    (tmp_path / "data" / "labels.csv").write_text("\n".join(rows) + "\n")
    manifest = tmp_path / "data" / "listed.toml"
    manifest.write_text('name = "Listed"\nroot = "images"\ncsv = "labels.csv"\n')
    code, out, _ = cli("data", "check", "--manifest", str(manifest))
    assert code == 1 and "NOT READY" in out
    assert (
        f"{tmp_path / 'data' / 'labels.csv'}: 3 row(s) whose path leaves the root {root} "
        f"(line 82: ../../elsewhere.png; line 83: {system}; line 84: "
        "a/cat/../../../../system.conf)"
    ) in out
    assert "80 of 80 images decoded" in out  # the rows outside the root are not read
    assert "rm '" not in out and system.is_file()
    with pytest.raises(UserError, match=r"3 row\(s\) whose path leaves the root"):
        dataset_class(load_manifest(manifest))(
            None, [0], hparams_registry.default_hparams("ERM", "PACS")
        )


def test_class_folders_linked_to_shared_storage_are_checked_as_domainbed_reads_them(tmp_path):
    """north's and west's cat folders are links to one shared folder, south's holds a copy of one
    of its images: DomainBed reads the shared images in two domains, and the copy in a third.
    The copies, a broken shared image and a loop there are named, with no command that would
    delete a shared original through a link."""
    manifest = dataset(tmp_path)
    images, shared = tmp_path / "images", tmp_path / "shared" / "cat"
    shared.parent.mkdir()
    (images / "north" / "cat").rename(shared)
    (images / "north" / "cat").symlink_to(shared)
    shutil.rmtree(images / "west" / "cat")
    (images / "west" / "cat").symlink_to(shared)
    shutil.copy(shared / "0.png", images / "south" / "cat" / "copy.png")
    (shared / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    code, out, _ = cli("data", "check", "--manifest", str(manifest))
    assert code == 1
    assert f"cannot be decoded: {images / 'north' / 'cat' / 'broken.png'} (" in out
    (copies,) = [line for line in out.splitlines() if "copy.png" in line]
    assert f"same content in several domains: {images / 'north' / 'cat' / '0.png'}" in copies
    (shared / "loop").symlink_to(".")
    report = check(manifest)
    (loop,) = [m for m in messages(report) if f"link {images / 'north' / 'cat' / 'loop'}" in m]
    assert f"points back to {shared}, a folder it lies in" in loop
    assert "rm '" not in out + loop


def test_the_data_check_names_the_network_the_input_size_picks_as_domainbed_builds_it(tmp_path):
    """A manifest at input_size 32 trains DomainBed's Wide ResNet-16-2, several times the cost
    of a step at 28: the check says which network, as DomainBed's Featurizer builds it."""
    from domainbed import networks

    manifest = dataset(tmp_path)
    manifest.write_text('name = "Mine"\nroot = "images"\ninput_size = 32\n')
    code, out, _ = cli("data", "check", "--manifest", str(manifest), "--quick")
    assert code == 0
    assert "  featurizer: 3x32x32 inputs: DomainBed's Wide ResNet-16-2, about 0.8 s a step" in out
    assert "docs/datasets.md#input-size-and-step-cost" in out
    hparams = hparams_registry.default_hparams("ERM", "RotatedDigits")
    built = {
        "Wide ResNet-16-2": networks.Featurizer((3, 32, 32), hparams),
        "MNIST_CNN": networks.Featurizer((1, 28, 28), hparams),
        "MLP": networks.Featurizer((64,), hparams),
    }
    for name, network in built.items():
        assert name.replace(" ResNet-16-2", "_ResNet") == type(network).__name__
    docs = (Path(__file__).parents[3] / "docs" / "datasets.md").read_text()
    assert "| 32x32 (`input_size = 32`) | Wide ResNet-16-2 | 3x32 |" in docs
