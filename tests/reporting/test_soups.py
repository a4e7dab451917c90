"""``dmg-domainbed soup``: the ensemble, uniform and greedy soups of real train.py runs, the
refusal of runs whose weights cannot be averaged, and the soups' own rows in ``report``; the
``init_seed`` hparam that makes a sweep's jobs start from one set of weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from domainbed import algorithms, datasets, hparams_registry
from domainbed.lib import misc

from dmg_domainbed.errors import UserError

from ..helpers import cli, domainbed_script, one_loader_worker, reload

SHARED = {"init_seed": 0, "mlp_width": 128, "mlp_depth": 3}  # the network fixed, lr etc. drawn
HPARAMS_SEEDS = (0, 1, 2)


def train(output: Path, hparams_seed: int, hparams: dict | None) -> Path:
    args = [
        *("--algorithm", "ERM", "--dataset", "RotatedDigits", "--test_envs", "0"),
        *("--steps", "3", "--checkpoint_freq", "2", "--trial_seed", "0"),
        *("--hparams_seed", str(hparams_seed), "--seed", str(100 + hparams_seed)),
        *("--output_dir", str(output)),
    ]
    if hparams is not None:
        args += ["--hparams", json.dumps(hparams)]
    with one_loader_worker():
        domainbed_script("train", *args)
    return output


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """ERM on RotatedDigits, test domain 0, trial 0, three hparams seeds, one ``init_seed``."""
    root = tmp_path_factory.mktemp("soup_sweep") / "sweep"
    for seed in HPARAMS_SEEDS:
        train(root / f"run{seed}", seed, SHARED)
    return root


@pytest.fixture(scope="module")
def souped(sweep, tmp_path_factory) -> tuple[Path, str]:
    output = tmp_path_factory.mktemp("souped") / "soups"
    code, printed, errors = cli("soup", "--input_dir", str(sweep), "--output_dir", str(output))
    assert code == 0, errors
    return output, printed


def records_of(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "soups.jsonl").read_text().splitlines()]


def soups_of(output: Path) -> dict[str, tuple[dict, Path]]:
    """Mode -> (its record, its model file: ``<id>.pkl``, named by its ``output_dir``)."""
    found = {}
    for record in records_of(output):
        model = Path(record["args"]["output_dir"] + ".pkl")
        found[record["soup"]["mode"]] = (record, model)
    return found


def splits_and_labels(run: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``env<i>_out_acc`` / ``env0_in_acc`` -> (images, labels) of that split, made as
    train.py makes it (DomainBed's own split and seed)."""
    record = json.loads((run / "results.jsonl").read_text().splitlines()[-1])
    args = record["args"]
    dataset = datasets.get_dataset_class("RotatedDigits")(None, [0], record["hparams"])
    found = {}
    for i, env in enumerate(dataset):
        seed = misc.seed_hash(args["trial_seed"], i)
        out, in_ = misc.split_dataset(env, int(len(env) * args["holdout_fraction"]), seed)
        for key, part in ((f"env{i}_out_acc", out), (f"env{i}_in_acc", in_)):
            if key.endswith("out_acc") or i == 0:
                pairs = [part[j] for j in range(len(part))]
                found[key] = (
                    torch.stack([x for x, _ in pairs]),
                    torch.tensor([y for _, y in pairs]),
                )
    return found


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return logits.argmax(1).eq(labels).float().mean().item()


@torch.no_grad()
def test_the_ensemble_averages_the_runs_logits_and_the_soups_their_weights(sweep, souped):
    """The ensemble's accuracies are those of the mean of the runs' logits; the uniform soup's
    model.pkl holds the mean of the runs' weights, and its accuracies are that model's; every
    split is train.py's, and the test domain's training split is scored for the selection."""
    soups = soups_of(souped[0])
    assert set(soups) == {"ensemble", "uniform", "greedy"}
    runs = sorted(sweep.iterdir())
    models = [reload(run)[0] for run in runs]
    splits = splits_and_labels(runs[0])
    ensemble = soups["ensemble"][0]
    uniform, uniform_model = soups["uniform"]
    assert ensemble["soup"]["name"] == "ERM (ensemble)"
    assert uniform["soup"]["name"] == "ERM (soup: uniform)"
    assert uniform_model.parent == souped[0] and uniform_model.is_file()
    assert not Path(ensemble["args"]["output_dir"] + ".pkl").exists()  # an ensemble has none
    model, checkpoint = reload(uniform_model)
    states = [torch.load(run / "model.pkl", weights_only=False)["model_dict"] for run in runs]
    for key, tensor in checkpoint["model_dict"].items():
        mean = torch.stack([state[key] for state in states]).mean(0)
        assert torch.allclose(tensor, mean, atol=1e-6), key
    for key, (x, y) in splits.items():
        mean = torch.stack([m.predict(x) for m in models]).mean(0)
        assert ensemble[key] == pytest.approx(accuracy(mean, y), abs=1e-6), key
        assert uniform[key] == pytest.approx(accuracy(model.predict(x), y), abs=1e-6), key
    assert {key for key in ensemble if key.startswith("env")} == set(splits)


@torch.no_grad()
def test_the_greedy_soup_starts_from_the_best_run_on_training_domain_validation(sweep, souped):
    """Greedy soup: the run of best training-domain validation accuracy first (the mean over
    source domains of the held-out split), each other joining only where the soup's does not
    fall; the test domain is never consulted."""
    greedy = soups_of(souped[0])["greedy"][0]
    runs = sorted(sweep.iterdir())
    splits = splits_and_labels(runs[0])
    validation = {
        str(run.resolve()): sum(
            accuracy(
                reload(run)[0].predict(splits[f"env{e}_out_acc"][0]), splits[f"env{e}_out_acc"][1]
            )
            for e in (1, 2, 3)
        )
        / 3
        for run in runs
    }
    members = greedy["soup"]["runs"]
    assert members[0] == max(validation, key=validation.get)
    assert greedy["soup"]["validation_acc"] >= validation[members[0]] - 1e-6
    assert greedy["soup"]["validation_acc"] == pytest.approx(
        sum(greedy[f"env{e}_out_acc"] for e in (1, 2, 3)) / 3
    )


def test_report_shows_each_soup_in_its_own_rows_compared_with_its_runs(sweep, souped, tmp_path):
    output, printed = souped
    assert "report --input_dir" in printed and "--soups" in printed
    code, printed, errors = cli(
        "report", "--input_dir", str(sweep), "--soups", str(output), "--output_dir", str(tmp_path)
    )
    assert code == 0, errors
    import pandas as pd

    results = pd.read_csv(tmp_path / "results.csv")
    names = set(results["algorithm"])
    assert names == {"ERM", "ERM (ensemble)", "ERM (soup: uniform)", "ERM (soup: greedy)"}
    # one row per soup and test domain, with its own accuracy (for every selection method that
    # has a result: the soup is the one model of its trial): never pooled with the single runs
    soups = soups_of(output)
    greedy = results[(results["test_env"] == "0") & (results["algorithm"] == "ERM (soup: greedy)")]
    assert len(greedy["accuracy"].dropna()) == 2
    assert greedy["accuracy"].dropna().tolist() == pytest.approx(
        [100 * soups["greedy"][0]["env0_in_acc"]] * 2
    )
    comparisons = pd.read_csv(tmp_path / "comparisons.csv")
    assert set(comparisons["algorithm"]) == names - {"ERM"}
    assert set(comparisons["reference"]) == {"ERM"}
    assert "Soups: 3 soups" in printed


def test_report_refuses_a_soups_folder_that_holds_none(sweep, tmp_path):
    code, _, errors = cli(
        "report", "--input_dir", str(sweep), "--soups", str(sweep), "--output_dir", str(tmp_path)
    )
    assert code != 0 and "does not hold soups" in errors


def test_report_refuses_a_soups_file_line_that_is_not_a_soups_record(sweep, tmp_path):
    made = tmp_path / "soups"
    code, _, errors = cli(
        "soup", "--input_dir", str(sweep), "--output_dir", str(made), "--modes", "ensemble"
    )
    assert code == 0, errors
    first, *others = (made / "soups.jsonl").read_text().splitlines()
    record = json.loads(first)
    soup = record["soup"]
    damaged = {  # the first line's replacement, and what the refusal says of it
        "5": "expected a JSON object",
        json.dumps({**record, "soup": 3}): "its 'soup' is 3, not an object",
        json.dumps({**record, "soup": {**soup, "runs": []}}): "'runs' is [], not a list",
        json.dumps({**record, "soup": {**soup, "mode": "bogus"}}): "mode is 'bogus', not one of",
        json.dumps({**record, "soup": {**soup, "of": 5}}): "has no 'name' and 'of'",
        # a run's record, not a soup's: the folder is not soup's output
        json.dumps({k: v for k, v in record.items() if k != "soup"}): "does not hold soups",
    }
    for number, (line, wrong) in enumerate(damaged.items()):
        folder = tmp_path / f"damaged{number}"
        folder.mkdir()
        (folder / "soups.jsonl").write_text("\n".join([line, *others]) + "\n")
        code, _, errors = cli(
            "report", "--input_dir", str(sweep), "--soups", str(folder),
            "--output_dir", str(tmp_path / f"report{number}"),
        )  # fmt: skip
        assert code != 0 and wrong in errors, (line, errors)
        assert "Traceback" not in errors and not (tmp_path / f"report{number}").exists()


@pytest.fixture(scope="module")
def own_seed_run(tmp_path_factory) -> Path:
    """A run of the group's hparams seed 0 without ``init_seed``: its job's own initialisation."""
    return train(tmp_path_factory.mktemp("own_seed") / "own", 0, {"mlp_width": 128, "mlp_depth": 3})


def test_runs_of_their_own_initialisation_are_refused_by_name_and_ensembled(
    sweep, own_seed_run, tmp_path
):
    mixed = tmp_path / "mixed"
    shutil.copytree(sweep / "run1", mixed / "run1")
    shutil.copytree(own_seed_run, mixed / "own")
    output = tmp_path / "soups"
    code, _, errors = cli("soup", "--input_dir", str(mixed), "--output_dir", str(output))
    assert code != 0
    assert f"'{mixed / 'own'}'" in errors and "own seed" in errors
    assert "init_seed" in errors and "--modes ensemble" in errors
    assert not output.exists()  # refused before anything was written
    code, _, errors = cli(
        "soup", "--input_dir", str(mixed), "--output_dir", str(output), "--modes", "ensemble"
    )
    assert code == 0, errors
    assert set(soups_of(output)) == {"ensemble"}


def test_runs_of_different_networks_are_refused_naming_the_hparams(tmp_path):
    """One init_seed, but the network's width and depth drawn by the random search (hparams
    seeds 0 and 1 draw 128 and 90 units): two architectures, which no average joins."""
    mixed = tmp_path / "mixed"
    for seed in (0, 1):
        train(mixed / f"run{seed}", seed, {"init_seed": 0})
    output = tmp_path / "soups"
    code, _, errors = cli("soup", "--input_dir", str(mixed), "--output_dir", str(output))
    assert code != 0
    assert "different architectures" in errors and "mlp_width (128 and 90)" in errors
    assert not output.exists()


def build(torch_seed: int, **hparams) -> torch.nn.Module:
    values = hparams_registry.default_hparams("DMG", "RotatedDigits") | hparams
    torch.manual_seed(torch_seed)
    shape = datasets.get_dataset_class("RotatedDigits").INPUT_SHAPE
    return algorithms.get_algorithm_class("DMG")(shape, 10, 3, values)


def test_init_seed_builds_one_set_of_weights_and_gives_the_job_its_own_random_state():
    """Jobs seeded differently build the same weights (DMG's masks and head included) with one
    ``init_seed``, different ones without; and after train.py's first call on the algorithm
    (``to``), torch draws what the job's seed draws, as if nothing had been built."""
    shared = [build(seed, init_seed=0).state_dict() for seed in (1, 2)]
    assert all(torch.equal(shared[0][k], shared[1][k]) for k in shared[0])
    own = [build(seed).state_dict() for seed in (1, 2)]
    assert not all(torch.equal(own[0][k], own[1][k]) for k in own[0])
    algorithm = build(5, init_seed=0)
    algorithm.to("cpu")
    drawn = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(drawn, torch.rand(3))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_jobs_of_one_init_seed_draw_their_own_randomness_from_their_first_update(precision):
    """A first ``update`` (before any ``to``) gives each job its own random state back, in
    either precision: two jobs built from one ``init_seed`` then draw differently."""
    drawn = []
    for seed in (5, 6):
        algorithm = build(seed, init_seed=0, precision=precision)
        minibatches = [(torch.zeros(4, 64), torch.zeros(4, dtype=torch.long)) for _ in range(3)]
        algorithm.update(minibatches)
        drawn.append(torch.rand(3))
    assert not torch.equal(*drawn)


def test_the_demos_sweep_is_ensembled_and_its_weights_refused(demo_sweep, tmp_path):
    """The demo's sweep (one run per algorithm and test domain, each of its job's own seed):
    its weights are refused, naming a run; its ensembles of one run are those runs, whose
    accuracies on the rebuilt splits are the ones train.py logged at their last step."""
    code, _, errors = cli("soup", "--input_dir", str(demo_sweep), "--output_dir", str(tmp_path))
    assert code != 0 and "were initialised from each job's own seed" in errors
    assert f"'{demo_sweep}" in errors
    output = tmp_path / "soups"
    code, _, errors = cli(
        "soup", "--input_dir", str(demo_sweep), "--output_dir", str(output), "--modes", "ensemble"
    )
    assert code == 0, errors
    soups = records_of(output)
    assert len(soups) == len(list(demo_sweep.glob("*/done")))
    for soup in soups:
        (run,) = soup["soup"]["runs"]
        logged = json.loads((Path(run) / "results.jsonl").read_text().splitlines()[-1])
        accuracies = {k: v for k, v in soup.items() if k.startswith("env")}
        assert accuracies == pytest.approx({k: logged[k] for k in accuracies}, abs=1e-6), run
        assert soup["soup"]["name"] == f"{logged['args']['algorithm']} (ensemble)"
    # report: each ensemble in its own rows, on every test domain, paired with its algorithm
    code, _, errors = cli(
        "report",
        "--input_dir",
        str(demo_sweep),
        "--soups",
        str(output),
        "--output_dir",
        str(tmp_path / "report"),
    )
    assert code == 0, errors
    import pandas as pd

    results = pd.read_csv(tmp_path / "report" / "results.csv").dropna(subset=["accuracy"])
    comparisons = pd.read_csv(tmp_path / "report" / "comparisons.csv")
    for soup in soups:
        name, of = soup["soup"]["name"], soup["soup"]["of"]
        env = str(soup["args"]["test_envs"][0])
        row = results[(results["algorithm"] == name) & (results["test_env"] == env)]
        assert row["accuracy"].tolist() == pytest.approx(
            [100 * soup[f"env{env}_in_acc"]] * len(row)
        )
        assert len(row) == 2  # training-domain and test-domain validation
        paired = comparisons[(comparisons["algorithm"] == name) & (comparisons["test_env"] == env)]
        assert set(paired["reference"]) == {"ERM", of}
        # the ensemble of one run is that run's model.pkl, its last checkpoint: which the
        # oracle selects too (training-domain validation may select an earlier one)
        oracle = paired[
            (paired["reference"] == of) & paired["selection_method"].str.contains("oracle")
        ]
        assert len(oracle) == 1 and abs(oracle["difference"].item()) < 1e-4  # points


def test_report_refuses_soups_of_another_sweep(sweep, souped, demo_sweep, tmp_path):
    code, _, errors = cli(
        "report",
        "--input_dir",
        str(demo_sweep),
        "--soups",
        str(souped[0]),
        "--output_dir",
        str(tmp_path),
    )
    assert code != 0 and "of runs of another sweep" in errors
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("given", [-2, 0.5, "0"])
def test_an_init_seed_that_is_no_seed_is_refused_when_built(given):
    with pytest.raises(UserError, match=r"'init_seed' = .* must be an integer >= -1"):
        build(0, init_seed=given)


def test_a_diverged_run_in_a_soup_is_warned_of(sweep, tmp_path):
    """A run whose logged loss is not finite still ends with a model; its soups say so."""
    copied = tmp_path / "sweep"
    shutil.copytree(sweep, copied)
    results = copied / "run1" / "results.jsonl"
    records = [json.loads(line) for line in results.read_text().splitlines()]
    records[-1]["loss"] = float("nan")
    results.write_text("".join(json.dumps(record) + "\n" for record in records))
    code, printed, errors = cli(
        "soup",
        "--input_dir",
        str(copied),
        "--output_dir",
        str(tmp_path / "soups"),
        "--modes",
        "ensemble",
    )
    assert code == 0, errors
    assert "WARNING" in printed and "diverged (loss nan at step 2)" in printed
    assert str(copied / "run1") in printed


def test_the_command_line_offers_every_mode_soup_makes():
    """`soup --modes` lists its choices without importing torch: the modes soups.py makes."""
    from dmg_domainbed.cli import results
    from dmg_domainbed.reporting import soups

    assert results.MODES == soups.MODES
