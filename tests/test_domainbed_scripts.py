"""DomainBed's own, unmodified scripts run the plugin algorithms (on CPU): ``train`` in the jobs
of the shared demo's sweep and in this process; in a new process where how it ends is tested."""

import json

import pytest
import torch
from domainbed import algorithms, datasets
from domainbed.lib import misc
from domainbed.lib.fast_data_loader import FastDataLoader

from dmg_domainbed.errors import UserError

from .helpers import DEMO_ALGORITHMS, domainbed_script, run_domainbed

PLUGINS = ("Aggregate", "MultiHead", "DMG")


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def runs_by_algorithm(sweep_dir):
    runs = {}
    for run_dir in sorted(p for p in sweep_dir.iterdir() if p.is_dir()):
        args = records(run_dir)[0]["args"]
        runs.setdefault(args["algorithm"], []).append(run_dir)
    return runs


def test_sweep_trains_every_algorithm_on_every_test_domain(demo_sweep):
    runs = runs_by_algorithm(demo_sweep)
    assert sorted(runs) == sorted(DEMO_ALGORITHMS)
    for algorithm, run_dirs in runs.items():
        assert len(run_dirs) == 4, algorithm
        assert all((run_dir / "done").exists() for run_dir in run_dirs)
    dmg_record = records(runs["DMG"][0])[-1]
    for key in ("ce", "overlap", "sparsity", "mask_active/d0", "mask_active/d2"):
        assert key in dmg_record
    assert any(key.startswith("mask_iou/") for key in dmg_record)


def test_collect_results_prints_the_plugin_rows_beside_erm(demo_sweep):
    out = domainbed_script("collect_results", "--input_dir", str(demo_sweep))
    assert "RotatedDigits" in out
    for method in ("training-domain validation set", "test-domain validation set (oracle)"):
        header = f"Dataset: RotatedDigits, model selection method: {method}"
        section = out.split(header)[1].split("--------")[0]
        rows = {line.split()[0] for line in section.splitlines()[2:] if line.strip()}
        assert set(DEMO_ALGORITHMS) <= rows, section


def test_list_top_hparams_reads_dmg_runs(demo_sweep):
    out = domainbed_script(
        "list_top_hparams",
        "--input_dir",
        str(demo_sweep),
        "--dataset",
        "RotatedDigits",
        "--algorithm",
        "DMG",
        "--test_env",
        "0",
    )
    assert "lambda_overlap" in out


@pytest.mark.parametrize("algorithm_name", PLUGINS)
def test_saved_model_reloads_with_the_accuracies_train_py_logged(demo_sweep, algorithm_name):
    run_dir = runs_by_algorithm(demo_sweep)[algorithm_name][0]
    saved = torch.load(run_dir / "model.pkl", weights_only=False)
    algorithm = algorithms.get_algorithm_class(algorithm_name)(
        saved["model_input_shape"],
        saved["model_num_classes"],
        saved["model_num_domains"],
        saved["model_hparams"],
    )
    algorithm.load_state_dict(saved["model_dict"])
    args, last = saved["args"], records(run_dir)[-1]
    dataset = datasets.get_dataset_class(args["dataset"])(
        args["data_dir"], args["test_envs"], saved["model_hparams"]
    )
    for env_i, env in enumerate(dataset):
        out, in_ = misc.split_dataset(
            env,
            int(len(env) * args["holdout_fraction"]),
            misc.seed_hash(args["trial_seed"], env_i),
        )
        for split, name in ((in_, "in"), (out, "out")):
            loader = FastDataLoader(dataset=split, batch_size=64, num_workers=0)
            accuracy = misc.accuracy(algorithm, loader, None, "cpu")
            assert accuracy == last[f"env{env_i}_{name}_acc"], (env_i, name)


def test_same_seed_gives_identical_results(demo_sweep, tmp_path):
    """A run of the demo's sweep (a job of its own) and the same command here agree."""
    run_dir = runs_by_algorithm(demo_sweep)["DMG"][0]
    args = records(run_dir)[0]["args"]
    domainbed_script(
        "train",
        *("--algorithm", "DMG", "--dataset", args["dataset"]),
        *("--test_envs", *map(str, args["test_envs"]), "--steps", str(args["steps"])),
        *("--seed", str(args["seed"]), "--trial_seed", str(args["trial_seed"])),
        *("--hparams_seed", str(args["hparams_seed"]), "--data_dir", args["data_dir"]),
        *(("--hparams", args["hparams"]) if args["hparams"] else ()),
        *("--output_dir", str(tmp_path)),
    )

    def comparable(rows):
        for row in rows:
            row.pop("step_time")
            row["args"].pop("output_dir")
        return rows

    assert comparable(records(tmp_path)) == comparable(records(run_dir))


def test_one_source_domain_trains(tmp_path):
    domainbed_script(
        "train",
        *("--algorithm", "DMG", "--dataset", "RotatedDigits", "--test_envs", "0", "1", "2"),
        *("--steps", "3", "--output_dir", str(tmp_path)),
    )
    last = records(tmp_path)[-1]
    assert (tmp_path / "done").exists()
    assert last["overlap"] == 0.0 and "mask_active/d0" in last


def test_bad_hparams_stop_train_py_before_the_first_step(tmp_path):
    args = ["--algorithm", "DMG", "--dataset", "RotatedDigits", "--output_dir", str(tmp_path)]
    with pytest.raises(UserError) as refused:
        domainbed_script("train", *args, "--hparams", '{"lambda_overlap": -1}')
    assert (
        "DMG hparam 'lambda_overlap' = -1 is not valid: it must be a number between 0 and 10000"
        in str(refused.value)
    )
    assert not (tmp_path / "results.jsonl").exists() and not (tmp_path / "done").exists()


def test_a_misspelt_hparam_ends_train_py_with_the_message_alone(tmp_path):
    """The process is what is tested: what it prints on its error stream (which train.py copies
    into err.txt and onto stdout) and its exit status."""
    args = ["--algorithm", "DMG", "--dataset", "RotatedDigits", "--steps", "1"]
    hparams = ["--hparams", '{"lamda_overlap": 0.5}']
    result = run_domainbed("train", *args, *hparams, "--output_dir", str(tmp_path), check=False)
    assert result.returncode == 1
    err = (tmp_path / "err.txt").read_text()
    message = "DMG does not know hparam 'lamda_overlap' (did you mean 'lambda_overlap'?)"
    assert err.startswith(f"dmg-domainbed: error: {message}: ") and err.count("\n") == 1
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout.endswith(err)  # the last thing the run printed
    assert not (tmp_path / "results.jsonl").exists()


def test_domainbed_s_own_algorithm_refuses_a_misspelt_hparam_before_the_first_step(tmp_path):
    args = ["--algorithm", "ERM", "--dataset", "RotatedDigits", "--steps", "1"]
    args += ["--hparams", '{"lrr": 1e-4}', "--output_dir", str(tmp_path)]
    with pytest.raises(UserError) as refused:
        domainbed_script("train", *args)
    assert str(refused.value).startswith("ERM does not know hparam 'lrr' (did you mean 'lr'?)")
    assert "(for ERM on RotatedDigits)" in str(refused.value)
    assert not (tmp_path / "results.jsonl").exists()
