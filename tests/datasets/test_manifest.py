"""Manifest datasets: a few lines of TOML make a folder of domains (or a CSV) a DomainBed dataset
with DomainBed's image hparams and augmentation; a bad manifest is refused with what was given
and how to fix it."""

import pickle
import re
from pathlib import Path

import pytest
import torch
from domainbed import algorithms, datasets, hparams_registry

from dmg_domainbed.datasets.image_files import DomainFiles
from dmg_domainbed.datasets.manifest import (
    MANIFESTS_VARIABLE,
    class_names,
    load_manifest,
    read_manifests,
)
from dmg_domainbed.errors import UserError
from dmg_domainbed.preflight import requirements
from dmg_domainbed.preflight.hparams import checked_run
from dmg_domainbed.sweep import config
from dmg_domainbed.sweep.checks import check_file

from ..helpers import cli, machine_check, snapshot
from .conftest import DOMAINS, write_domains


def write_manifest(folder, text, name="mydata.toml"):
    (folder / name).write_text(text)
    return folder / name


@pytest.fixture
def manifest(tmp_path):
    # 40 images a domain: 32 to train on after DomainBed holds out 20%, one default batch.
    write_domains(tmp_path / "images", per_class=20)
    return write_manifest(
        tmp_path,
        'name = "MyData"\nroot = "images"\ninput_size = 28\nsteps = 40\ncheckpoint_freq = 20\n',
    )


def test_a_folder_of_domains_becomes_a_domainbed_image_dataset(manifest, registered):
    (manifest.parent / "images" / ".ipynb_checkpoints" / "cat").mkdir(parents=True)
    (manifest.parent / "images" / "north" / ".thumbnails").mkdir()  # hidden: no domain, no class
    assert registered(manifest) == ["MyData"]
    cls = datasets.get_dataset_class("MyData")
    assert "MyData" in datasets.DATASETS and issubclass(
        cls, datasets.MultipleEnvironmentImageFolder
    )
    assert (cls.ENVIRONMENTS, cls.N_STEPS, cls.CHECKPOINT_FREQ) == (list(DOMAINS), 40, 20)
    assert datasets.num_environments("MyData") == 3
    # Pickled by reference, as DomainBed's own classes: found again where registered.
    assert cls.__module__ == "domainbed.datasets" and pickle.loads(pickle.dumps(cls)) is cls
    hparams = hparams_registry.default_hparams("ERM", "MyData")
    assert hparams["batch_size"] == 32  # DomainBed's image hparams, not its small-image ones
    dataset = cls(None, [2], hparams)  # DomainBed's train.py passes --data_dir: not read
    assert len(dataset) == 3 and dataset.num_classes == 2 and dataset.input_shape == (3, 28, 28)
    assert [len(env) for env in dataset] == [40, 40, 40]
    x, y = dataset[0][21]
    assert x.shape == (3, 28, 28) and y == 1 and dataset[0].samples[21][0].endswith("dog/1.png")
    # Training domains are augmented (random crops), the test domain is not.
    torch.manual_seed(0)
    assert not torch.equal(dataset[0][0][0], dataset[0][0][0])
    assert torch.equal(dataset[2][0][0], dataset[2][0][0])
    plain = cls(None, [2], {**hparams, "data_augmentation": False})
    assert torch.equal(plain[0][0][0], plain[0][0][0])


# SFMOE is left out: its DeiT-S weights; it is checked by the same PluginAlgorithm path.
@pytest.mark.parametrize("name", ["DMG", "MultiHead", "Aggregate", "CorGrad", "ImportanceMask"])
def test_every_algorithm_builds_on_a_manifest_dataset_as_train_py_builds_it(
    manifest, registered, name
):
    registered(manifest)
    hparams = hparams_registry.default_hparams(name, "MyData")
    dataset = datasets.get_dataset_class("MyData")(None, [2], hparams)  # records its domains
    assert hparams["manifest_domains"] == list(DOMAINS)
    algorithm = algorithms.get_algorithm_class(name)(
        dataset.input_shape, dataset.num_classes, len(dataset) - 1, hparams
    )
    x = dataset[0][0][0][None]  # one image of the first domain
    assert algorithm.predict(x).shape == (1, dataset.num_classes)


def test_the_preflight_checks_the_hparams_the_algorithm_is_built_with(manifest, registered):
    registered(manifest)
    overrides = {"lambda_overlap": 0.5}
    built_with = hparams_registry.default_hparams("DMG", "MyData") | overrides
    datasets.get_dataset_class("MyData")(None, [0], built_with)
    # What only the files tell (classes, counts, their digest) is known once they are read.
    from_files = {"manifest_classes": None, "manifest_images": None, "manifest_files": None}
    assert checked_run("DMG", "MyData", overrides).hparams == built_with | from_files
    # A run cannot set what the dataset records: the dataset would replace it.
    with pytest.raises(UserError, match="'manifest_domains' is recorded by dataset MyData"):
        checked_run("DMG", "MyData", {"manifest_domains": ["south", "north", "west"]})


def test_a_sweep_setting_what_the_dataset_records_is_told_to_remove_it(manifest, registered):
    registered(manifest)
    path = manifest.parent / "sweep.toml"
    path.write_text(
        '[sweep]\nalgorithms = ["ERM", "DMG"]\ndatasets = ["MyData"]\n'
        '[sweep.hparams]\nmanifest_domains = ["south", "north", "west"]\n'
    )
    with pytest.raises(UserError) as refused:
        check_file(config.load_sweep(path))
    message = str(refused.value)
    assert "[sweep.hparams]: hparam 'manifest_domains'" in message
    assert "is recorded by dataset MyData" in message and "Remove it" in message
    assert "algorithm_hparams" not in message  # every algorithm has it: nothing to move


def test_a_csv_of_path_label_and_domain(tmp_path, registered):
    write_domains(tmp_path / "images", domains=("a", "b"), classes=("x",), per_class=4)
    lines = ["path,label,domain,note"]
    lines += [f"{d}/x/{i}.png,{i % 2 + 9},{d},-" for d in ("b", "a") for i in range(4)]
    (tmp_path / "labels.csv").write_text("\n".join(lines) + "\n")
    file = write_manifest(tmp_path, 'name = "Listed"\nroot = "images"\ncsv = "labels.csv"\n')
    assert registered(file) == ["Listed"]
    cls = datasets.get_dataset_class("Listed")
    assert cls.ENVIRONMENTS == ["a", "b"] and cls.INPUT_SHAPE == (3, 224, 224)
    dataset = cls(None, [0], hparams_registry.default_hparams("ERM", "Listed"))
    assert dataset.classes == ["9", "10"]  # numbers in numeric order
    assert sorted(dataset[1].targets) == [0, 0, 1, 1]
    (tmp_path / "images" / "a" / "x" / "3.png").unlink()
    with pytest.raises(UserError, match=r"domain 'a' of Listed .*: 1 file\(s\) its CSV names do "):
        cls(None, [0], hparams_registry.default_hparams("ERM", "Listed"))


@pytest.mark.parametrize(
    "text, message",
    [
        ('root = "images"\n', r"name = \.\.\. is required"),
        ('name = "My Data"\nroot = "images"\n', r"name = 'My Data' is not valid: it must be a"),
        ('name = "D"\nroot = "photos"\n', r"root = 'photos': no folder .*photos; give the folder"),
        (
            'name = "D"\nroot = "images"\ninput_size = 64\n',
            r"must be an integer: 28 \(DomainBed's MNIST_CNN\), 32 .*, 224 \(DomainBed's ResNet\)",
        ),
        ('name = "D"\nroot = "images"\nsplits = 3\n', "unknown key.* splits; valid keys: name,"),
        ('name = "D"\nroot = "images"\ndomains = ["north", "east"]\n', "domains east are not in"),
        ('name = "D"\nroot = "images"\ndomains = ["north"]\n', "domain generalization needs at"),
        ('name = "D"\nroot = "images\n', "not valid TOML"),
        (
            'name = "D"\nroot = "images"\ninput_size = 28.0\n',
            r"input_size = 28\.0 is not .* integer",
        ),
        (
            'name = "D"\nroot = "images"\ninput_size = true\n',
            r"input_size = True is not .* integer",
        ),
    ],
)
def test_a_bad_manifest_says_what_was_given_and_how_to_fix_it(manifest, text, message):
    bad = write_manifest(manifest.parent, text, "bad.toml")
    with pytest.raises(UserError, match=message) as refused:
        load_manifest(bad)
    assert str(bad) in str(refused.value)


def test_a_domain_without_images_or_a_class_missing_in_one_domain_is_refused(manifest, registered):
    registered(manifest)
    cls, hparams = (
        datasets.get_dataset_class("MyData"),
        hparams_registry.default_hparams("ERM", "PACS"),
    )
    images = manifest.parent / "images"
    for image in (images / "south" / "cat").iterdir():
        image.unlink()
    with pytest.raises(
        UserError, match=r"domain 'south' .*: no images of class\(es\) 'cat', which"
    ):
        cls(None, [0], hparams)
    code, out, _ = cli("data", "check", "--quick")
    assert code == 1 and "no images of class(es) 'cat', which other domains have" in out
    status = requirements.data_status("MyData", None)
    assert status.state == "not usable" and "no images of class(es) 'cat'" in status.detail
    for image in (images / "south" / "dog").iterdir():
        image.unlink()
    with pytest.raises(UserError, match=r"domain 'south' of MyData .*: no images; put its images"):
        cls(None, [0], hparams)


@pytest.mark.parametrize(
    "base, written, how",
    [
        ("cat", "cat ", "white space at an end"),
        ("cat", "Cat", "upper and lower case"),
        ("c\u00e1t", "ca\u0301t", "Unicode normal form"),  # composed, decomposed (macOS)
    ],
)
def test_a_class_named_two_ways_that_read_alike_is_told_apart(
    manifest, registered, base, written, how
):
    registered(manifest)
    images = manifest.parent / "images"
    for domain in DOMAINS:
        (images / domain / "cat").rename(images / domain / (written if domain == "south" else base))
    code, out, _ = cli("data", "check", "--quick")
    assert code == 1
    assert f"no images of class(es) {base!r} (it has {written!r}: the names differ in {how}" in out


def test_names_that_are_taken_and_paths_that_cannot_be_found_are_refused(
    manifest, registered, capsys, monkeypatch
):
    clash = write_manifest(manifest.parent, 'name = "PACS"\nroot = "images"\n', "pacs.toml")
    twin = write_manifest(manifest.parent / "images", 'name = "MyData"\nroot = "."\n', "twin.toml")
    assert registered(manifest, clash, twin) == ["MyData"]
    err = capsys.readouterr().err
    assert f"dataset manifest {clash}: name 'PACS' is taken by DomainBed" in err
    assert f"dataset manifest {twin}: name 'MyData' is already taken by {manifest}" in err
    assert datasets.get_dataset_class("PACS").__module__ == "domainbed.datasets"
    # data check says so too, and fails
    monkeypatch.setenv(MANIFESTS_VARIABLE, f"{manifest}:{clash}")
    code, out, _ = cli("data", "check", "--quick")
    assert code == 1 and f"[ERROR] dataset manifest {clash}: name 'PACS' is taken" in out
    assert "MyData: ok" in out
    (relative,) = read_manifests({MANIFESTS_VARIABLE: "mydata.toml"})[1]
    assert f"{MANIFESTS_VARIABLE} names 'mydata.toml', a relative path" in str(relative)
    assert f"{MANIFESTS_VARIABLE}=$PWD/mydata.toml" in str(relative)
    (folder_problem,) = read_manifests({MANIFESTS_VARIABLE: str(manifest.parent / "gone")})[1]
    assert "which does not exist" in str(folder_problem)


def test_a_sweep_of_a_dataset_two_manifests_name_is_refused_as_data_check_refuses_it(
    manifest, registered, monkeypatch, tmp_path
):
    twin = write_manifest(manifest.parent / "images", 'name = "MyData"\nroot = "."\n', "twin.toml")
    monkeypatch.setenv(MANIFESTS_VARIABLE, f"{manifest}:{twin}")
    registered(manifest, twin)
    code, out, _ = cli("data", "check", "--quick")
    taken = f"dataset manifest {twin}: name 'MyData' is already taken by {manifest}"
    assert code == 1 and f"[ERROR] {taken}" in out
    sweep_file, output = tmp_path / "sweep.toml", tmp_path / "sweep"
    sweep_file.write_text(
        '[sweep]\nalgorithms = ["ERM"]\ndatasets = ["MyData"]\nn_hparams = 1\nn_trials = 1\n'
        "single_test_envs = true\n[sweep.hparams]\nbatch_size = 8\n"
    )
    code, _, err = cli(
        "sweep",
        str(sweep_file),
        "--data_dir",
        str(tmp_path),
        "--output_dir",
        str(output),
        "--launcher",
        "local",
    )
    assert code == 2 and taken in err and "DMG_DOMAINBED_DATASETS" in err
    assert not output.exists()


def test_data_check_of_a_manifest_file_before_it_is_exported(manifest):
    code, out, _ = cli("data", "check", "--manifest", str(manifest))
    assert code == 0, out
    assert "MyData: " in out and "120 of 120 images decoded" in out
    clash = write_manifest(manifest.parent, 'name = "VLCS"\nroot = "images"\n', "vlcs.toml")
    code, _, err = cli("data", "check", "--manifest", str(clash))
    assert code == 2 and "name 'VLCS' is taken by DomainBed or a plugin" in err


def test_a_manifest_that_is_not_utf8_is_named_and_the_others_still_register(
    manifest, registered, capsys, monkeypatch
):
    latin = manifest.parent / "latin.toml"
    latin.write_bytes('# caf\xe9 photos\nname = "Cafe"\nroot = "images"\n'.encode("latin-1"))
    with pytest.raises(UserError, match="is not UTF-8 text") as refused:
        load_manifest(latin)
    assert f"dataset manifest {latin} is not UTF-8 text" in str(refused.value)
    assert "save it as UTF-8" in str(refused.value)
    # At import: skipped with a message, and the manifest named after it still registers.
    assert registered(latin, manifest) == ["MyData"]
    assert f"dataset manifest {latin} is not UTF-8 text" in capsys.readouterr().err
    monkeypatch.setenv(MANIFESTS_VARIABLE, f"{latin}:{manifest}")
    code, out, _ = cli("data", "check", "--quick")
    assert code == 1 and f"[ERROR] dataset manifest {latin} is not UTF-8 text" in out
    assert "MyData: ok" in out
    # A CSV that is not UTF-8 either.
    (manifest.parent / "labels.csv").write_bytes(
        "path,label,domain\nnorth/caf\xe9.png,cat,north\n".encode("latin-1")
    )
    table = write_manifest(
        manifest.parent, 'name = "T"\nroot = "images"\ncsv = "labels.csv"\n', "t.toml"
    )
    with pytest.raises(UserError, match=r"labels\.csv is not UTF-8 text"):
        load_manifest(table)


def test_a_manifest_named_by_its_file_and_by_its_folder_registers_once(
    manifest, registered, capsys, monkeypatch
):
    assert registered(manifest, manifest.parent) == ["MyData"]
    assert "already taken" not in capsys.readouterr().err
    monkeypatch.setenv(MANIFESTS_VARIABLE, f"{manifest}:{manifest.parent}")
    code, out, _ = cli("data", "check", "--quick")
    assert code == 0, out
    assert "already taken" not in out and "READY: every dataset checked is ok" in out


def write_listed(folder, extra_rows=()):
    """Two domains of two classes listed in a CSV (40 images a domain), then ``extra_rows``."""
    write_domains(folder / "images", domains=("a", "b"), classes=("x", "y"), per_class=20)
    rows = ["path,label,domain"]
    rows += [f"{d}/{c}/{i}.png,{c},{d}" for d in "ab" for c in "xy" for i in range(20)]
    (folder / "labels.csv").write_text("\n".join([*rows, *extra_rows]) + "\n")
    return write_manifest(folder, 'name = "Listed"\nroot = "images"\ncsv = "labels.csv"\n')


def test_a_file_listed_twice_in_the_csv_is_refused_naming_its_rows(tmp_path, registered):
    file = write_listed(tmp_path, ["a/x/0.png,y,a", "b/y/3.png,y,b"])
    code, out, _ = cli("data", "check", "--manifest", str(file), "--quick")
    assert code == 1
    image = tmp_path / "images" / "a" / "x" / "0.png"
    assert (
        f"lists {image} 2 times (line 2: label x, domain a; line 82: label y, domain a): "
        "DomainBed would read one image under 2 labels; keep one row of it"
    ) in out
    same = tmp_path / "images" / "b" / "y" / "3.png"
    assert (
        f"lists {same} 2 times (line 65: label y, domain b; line 83: label y, domain b): "
        "DomainBed would read the same image 2 times"
    ) in out
    registered(file)
    with pytest.raises(UserError, match=r"lists .*0\.png 2 times"):
        datasets.get_dataset_class("Listed")(
            None, [0], hparams_registry.default_hparams("ERM", "Listed")
        )


def test_a_csv_row_with_missing_fields_is_named(tmp_path):
    file = write_listed(tmp_path, ["a/x/5.png,x", "b/x/6.png,,b"])
    code, out, _ = cli("data", "check", "--manifest", str(file), "--quick")
    assert code == 1
    csv_file = tmp_path / "labels.csv"
    assert (
        f"{csv_file}: 2 row(s) without a path, a label or a domain (line(s) 82, 83): DomainBed "
        "would leave them out"
    ) in out


def test_classes_of_one_number_are_ordered_alike_in_every_process():
    """``1`` and ``01`` tie in a numeric sort: the names break the tie, whatever the order of
    the set they come from (which changes with PYTHONHASHSEED)."""
    names = ["1", "01", "001", "0001", "00001", "000001", "02", "2", "10"]
    domain = DomainFiles("a", Path("a"), classes={name: [] for name in names})
    expected = ["000001", "00001", "0001", "001", "01", "1", "02", "2", "10"]
    assert class_names([domain]) == expected
    assert class_names([DomainFiles("b", Path("b"), classes=dict.fromkeys(names[::-1]))]) == (
        expected
    )


def test_labels_that_write_one_number_twice_are_refused(tmp_path, registered):
    """A spreadsheet that drops a leading zero makes ``01`` and ``1`` two classes."""
    write_domains(tmp_path / "images", domains=("a", "b"), classes=("x", "y"), per_class=20)
    rows = ["path,label,domain"]
    rows += [
        f"{d}/{c}/{i}.png,{'1' if c == 'x' else '01'},{d}"
        for d in "ab"
        for c in "xy"
        for i in range(20)
    ]
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    file = write_manifest(tmp_path, 'name = "Listed"\nroot = "images"\ncsv = "labels.csv"\n')
    code, out, _ = cli("data", "check", "--manifest", str(file), "--quick")
    assert code == 1 and "NOT READY" in out
    assert (
        f"Listed ({file}): classes '01' and '1' write the same number 1: DomainBed would train "
        f"them as 2 classes with labels of their own; write each label one way in every row of "
        f"{tmp_path / 'labels.csv'}"
    ) in out
    registered(file)
    with pytest.raises(UserError, match="classes '01' and '1' write the same number 1"):
        datasets.get_dataset_class("Listed")(
            None, [0], hparams_registry.default_hparams("ERM", "Listed")
        )


def test_a_sweep_into_a_dataset_s_folder_or_the_file_system_s_root_is_refused(
    manifest, registered, tmp_path
):
    """Job folders in a folder of domains would be domains (in a domain, classes); a sweep into
    ``/`` would spread its job folders among the system's. Refused before anything is written."""
    registered(manifest)
    images, data = manifest.parent / "images", tmp_path / "data"
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(
        '[sweep]\nalgorithms = ["ERM"]\ndatasets = ["MyData"]\nn_hparams = 1\nn_trials = 1\n'
        "single_test_envs = true\n[sweep.hparams]\nbatch_size = 8\n"
    )
    refusals = {
        images: f"lies inside the MyData dataset folder '{images}', which is only read: job "
        "folders written in it would be read as the dataset's domains or classes",
        images / "north" / "runs": "lies inside the MyData dataset folder",
        data / "PACS" / "sweep": f"lies inside the PACS dataset folder '{data / 'PACS'}'",
        Path("/"): "the sweep's output_dir '/' is the root of the file system",
    }
    for output, message in refusals.items():
        sweep = config.resolve(config.load_sweep(sweep_file), str(data), str(output))
        with pytest.raises(UserError, match=re.escape(message)):
            machine_check(sweep)
    assert machine_check(
        config.resolve(config.load_sweep(sweep_file), str(data), str(data / "sweep"))
    )
    before = snapshot(images)
    code, _, err = cli(
        "sweep",
        str(sweep_file),
        "--data_dir",
        str(data),
        "--output_dir",
        str(images),
        "--launcher",
        "local",
    )
    assert code == 2 and refusals[images] in err
    assert snapshot(images) == before and sorted(p.name for p in images.iterdir()) == list(DOMAINS)
