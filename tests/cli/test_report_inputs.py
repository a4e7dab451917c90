"""What ``report``, ``evaluate`` and ``masks`` do with runs that do not fit today's dataset,
runs given twice, runs in two precisions, and where they write when not told."""

import json
import os
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from tests.helpers import DEMO_ALGORITHMS, cli, runs_of, snapshot


def rewrite_records(run, change):
    """Apply ``change`` to every record of the run's results.jsonl."""
    path = run / "results.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(change(r) or r) + "\n" for r in records))


def small_sweep(demo_sweep, folder, algorithms=("ERM", "DMG")):
    """A copy of the demo runs of ``algorithms`` on every test domain."""
    for (algorithm, env), run in runs_of(demo_sweep).items():
        if algorithm in algorithms:
            shutil.copytree(run, folder / f"{algorithm}_{env}")
    return folder


def drop_environment(record):
    """A record of a run trained when RotatedDigits had three domains, not four."""
    for key in [k for k in record if k.startswith("env3_")]:
        del record[key]


def test_runs_recorded_on_other_environments_are_refused_naming_them(demo_sweep, tmp_path):
    sweep = small_sweep(demo_sweep, tmp_path / "sweep")
    run = sweep / "DMG_1"
    rewrite_records(run, drop_environment)
    before = snapshot(sweep)
    for command in (
        ("report", "--input_dir", str(sweep), "--output_dir", str(tmp_path / "r")),
        ("evaluate", "--run_dir", str(run), "--output_dir", str(tmp_path / "e")),
    ):
        code, printed, message = cli(*command)
        assert code == 2 and printed == "", command
        assert f"{run / 'results.jsonl'}' holds a run trained on 3 environments" in message
        assert "RotatedDigits has 4 today (0, 30, 60, 90)" in message
        assert "under other domains' names" in message
    assert snapshot(sweep) == before
    assert not (tmp_path / "r").exists() and not (tmp_path / "e").exists()


def test_a_test_environment_the_dataset_no_longer_has_is_refused(copied_run, tmp_path):
    run = copied_run("ERM", 0)
    rewrite_records(run, lambda r: {**r, "args": {**r["args"], "test_envs": [4]}})
    code, _, message = cli("evaluate", "--run_dir", str(run), "--output_dir", str(tmp_path / "o"))
    assert code == 2 and "test envs [4]" in message and "has 4 today" in message


def test_a_dataset_unknown_here_names_the_manifest_variable(demo_sweep, tmp_path):
    sweep = small_sweep(demo_sweep, tmp_path / "sweep", ("ERM",))
    for run in sweep.iterdir():
        rewrite_records(run, lambda r: {**r, "args": {**r["args"], "dataset": "XRay"}})
    run = next(sweep.iterdir())
    for command in (
        ("report", "--input_dir", str(sweep), "--output_dir", str(tmp_path / "r")),
        ("evaluate", "--run_dir", str(run), "--output_dir", str(tmp_path / "e")),
    ):
        code, _, message = cli(*command)
        assert code == 2 and "Traceback" not in message, command
        assert "dataset 'XRay', which DomainBed does not know here" in message, command
        assert "export DMG_DOMAINBED_DATASETS=/absolute/path/to/XRay.toml" in message, command


def test_evaluate_names_a_run_given_twice_and_two_runs_of_one_algorithm(copied_run, tmp_path):
    run = copied_run("DMG", 0)
    code, _, message = cli("evaluate", "--run_dir", str(run), str(run))
    assert code == 2 and f"run '{run}' is given twice" in message
    other = tmp_path / "other"
    shutil.copytree(run, other)
    rewrite_records(other, lambda r: {**r, "args": {**r["args"], "hparams_seed": 5}})
    code, _, message = cli("evaluate", "--run_dir", str(run), str(other))
    assert code == 2 and "Index contains duplicate entries" not in message
    assert f"runs '{run}' and '{other}' are both runs of DMG on test envs [0]" in message
    assert not (run / "dmg_evaluate").exists() and not (tmp_path / "dmg_evaluate").exists()


def test_evaluate_and_masks_write_beside_the_run_and_say_where(copied_run):
    run = copied_run("DMG", 2)
    code, printed, _ = cli("evaluate", "--run_dir", str(run))
    assert code == 0 and f"Wrote into {run / 'dmg_evaluate'}: in_domain.csv" in printed
    table = (run / "dmg_evaluate" / "in_domain.md").read_text()
    last = json.loads((run / "results.jsonl").read_text().splitlines()[-1])
    # the run's folder relative to the table's: no absolute path in the file
    assert (
        f"- DMG: trial seed 0, hparams seed 0, step {last['step']} (folder ..); hparams " in table
    )
    assert str(run) not in table
    assert json.dumps(last["hparams"], sort_keys=True) in table
    code, printed, _ = cli("masks", "--run_dir", str(run))
    assert code == 0 and f"Wrote into {run / 'dmg_masks'}: " in printed
    assert (run / "dmg_masks" / "masks.png").is_file()


def bf16_copies(sweep, algorithm="ERM", shift=0.0):
    """A copy of every run of ``algorithm`` in ``sweep``, recorded as trained in bf16, its
    accuracies raised by ``shift`` (a fraction)."""
    for env in range(4):
        copy = sweep / f"{algorithm}_bf16_{env}"
        shutil.copytree(sweep / f"{algorithm}_{env}", copy)

        def in_bf16(record, copy=copy):
            accuracies = {k: v + shift for k, v in record.items() if k.endswith("_acc")}
            hparams = {**record["hparams"], "precision": "bf16"}
            args = {**record["args"], "output_dir": str(copy)}
            return {**record, **accuracies, "hparams": hparams, "args": args}

        rewrite_records(copy, in_bf16)


def test_runs_of_two_precisions_are_never_pooled_in_one_cell(demo_sweep, tmp_path):
    sweep = small_sweep(demo_sweep, tmp_path / "sweep")
    bf16_copies(sweep)  # the same ERM runs, recorded as trained in bf16
    code, printed, _ = cli("report", "--input_dir", str(sweep), "--output_dir", str(tmp_path / "r"))
    assert code == 0
    assert "the runs are in bf16 and fp32" in printed
    results = pd.read_csv(tmp_path / "r" / "results.csv")
    cells = results[(results["test_env"] != "Avg") & results["accuracy"].notna()]
    assert set(cells["algorithm"]) == {"ERM", "DMG", "ERM (bf16)"}
    assert (cells["n_trials"] == 1).all()  # one run per cell: nothing pooled
    fp32, bf16 = (cells[cells["algorithm"] == name] for name in ("ERM", "ERM (bf16)"))
    assert fp32["text"].tolist() == bf16["text"].tolist()  # the same runs, apart
    comparisons = pd.read_csv(tmp_path / "r" / "comparisons.csv")
    assert "ERM (bf16)" in set(comparisons["algorithm"])
    assert (comparisons.loc[comparisons["algorithm"] == "ERM (bf16)", "difference"] == 0).all()


def test_runs_in_bf16_get_their_own_name_in_pictures_and_tensorboard(demo_sweep, tmp_path):
    sweep = small_sweep(demo_sweep, tmp_path / "sweep", ("DMG",))
    bf16_copies(sweep, "DMG")
    output, logs = tmp_path / "r", tmp_path / "tb"
    code, _, _ = cli(
        *("report", "--input_dir", str(sweep), "--output_dir", str(output)),
        *("--tensorboard", str(logs)),
    )
    assert code == 0
    drawn = {path.name for path in output.glob("*_diagnostics_*.png")}
    assert drawn == {
        "dmg_diagnostics_RotatedDigits.png",
        "dmg-bf16_diagnostics_RotatedDigits.png",  # no space or bracket a shell would split
    }
    # TensorBoard's runs (<algorithm>/<dataset>/test_env<e>/hparams<h>_trial<t>_<folder>) are
    # named as the tables name them
    runs = [p.parent.relative_to(logs).parts for p in logs.glob("*/*/*/*/events.*")]
    named = {folder.split("_", 2)[2]: algorithm for algorithm, _, _, folder in runs}
    assert named == {f"DMG_{env}": "DMG" for env in range(4)} | {
        f"DMG_bf16_{env}": "DMG (bf16)" for env in range(4)
    }


def test_select_keeps_runs_of_two_precisions_apart_as_report_does(demo_sweep, tmp_path):
    sweep = small_sweep(demo_sweep, tmp_path / "sweep", ("ERM",))
    code, _, _ = cli("select", "--input_dir", str(sweep), "--output_dir", str(tmp_path / "fp32"))
    assert code == 0
    alone = pd.read_csv(tmp_path / "fp32" / "selection.csv").set_index(["prediction", "test_env"])
    bf16_copies(sweep, shift=0.05)  # the ERM runs again, in bf16, 5 points better everywhere
    code, printed, _ = cli("select", "--input_dir", str(sweep), "--output_dir", str(tmp_path / "s"))
    assert code == 0
    both = pd.read_csv(tmp_path / "s" / "selection.csv").set_index(["prediction", "test_env"])
    assert set(both.index.get_level_values(0)) == {"ERM (predict)", "ERM (bf16) (predict)"}
    fp32 = both.loc["ERM (predict)"]
    assert fp32["accuracy"].tolist() == alone.loc["ERM (predict)"]["accuracy"].tolist()
    assert (fp32["n_trials"].dropna() == 1).all()
    bf16 = both.loc["ERM (bf16) (predict)", "accuracy"]
    assert bf16.to_numpy() == pytest.approx(fp32["accuracy"].to_numpy() + 5)
    assert "the runs are in bf16 and fp32" in printed
    report = tmp_path / "r"
    assert cli("report", "--input_dir", str(sweep), "--output_dir", str(report))[0] == 0
    results = pd.read_csv(report / "results.csv").set_index(["algorithm", "test_env"])
    iid = results[results["selection_method"] == "training-domain validation set"]
    assert iid.loc["ERM (bf16)", "accuracy"].to_numpy() == pytest.approx(bf16.to_numpy())


@pytest.fixture
def two_trials(demo_sweep, tmp_path):
    """ERM and DMG on every test domain, trial 0 as the demo ran it and trial 1 a copy whose
    DMG accuracies are shifted, so the paired differences have intervals."""
    sweep = small_sweep(demo_sweep, tmp_path / "sweep")
    for run in list(sweep.iterdir()):
        copy = sweep / f"{run.name}_trial1"
        shutil.copytree(run, copy)

        def second_trial(record, copy=copy):
            shift = 0.01 if record["args"]["algorithm"] == "DMG" else 0.0
            accuracies = {
                k: v + shift for k, v in record.items() if re.fullmatch(r"env\d_\w+_acc", k)
            }
            args = {**record["args"], "trial_seed": 1, "output_dir": str(copy)}
            return {**record, **accuracies, "args": args}

        rewrite_records(copy, second_trial)
    return sweep


@pytest.fixture
def three_trials(demo_sweep, tmp_path):
    """Every algorithm of the demo on every test domain in three trials: the demo's run and two
    copies whose accuracies are moved by a few points, differently for each algorithm, test
    domain and trial, so that each cell and difference has an interval of its own."""
    sweep = small_sweep(demo_sweep, tmp_path / "sweep", DEMO_ALGORITHMS)
    for run in list(sweep.iterdir()):
        for trial in (1, 2):
            copy = sweep / f"{run.name}_trial{trial}"
            shutil.copytree(run, copy)

            def moved(record, copy=copy, trial=trial):
                args = {**record["args"], "trial_seed": trial, "output_dir": str(copy)}
                turn = DEMO_ALGORITHMS.index(args["algorithm"]) * 5 + trial * 7
                accuracies = {
                    k: v + ((turn + 3 * int(k[3])) % 11 - 5) / 100
                    for k, v in record.items()
                    if re.fullmatch(r"env\d_\w+_acc", k)
                }
                return {**record, **accuracies, "args": args}

            rewrite_records(copy, moved)
    return sweep


def drawn_report(sweep, output, monkeypatch):
    """``report`` of ``sweep`` into ``output``; the accuracy figure it drew."""
    from dmg_domainbed.reporting import report

    drawn, real = [], report.accuracy_figure
    monkeypatch.setattr(report, "accuracy_figure", lambda *a, **k: drawn.append(real(*a, **k)))
    monkeypatch.setattr(report, "save", lambda figure, path: path)  # nothing else to save
    code, _, _ = cli("report", "--input_dir", str(sweep), "--output_dir", str(output))
    assert code == 0
    return drawn[0]


def values_overlap(figure) -> list[str]:
    """The values written on the figure's bars that come within 2 pixels of one another or of
    their panel's frame (or leave it, into its title, the legend or another panel), or that
    cross an error bar."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw(renderer)
    found = []
    for axis in figure.axes:
        inside = axis.get_window_extent(renderer)
        boxes = [(t.get_text(), t.get_window_extent(renderer).padded(2)) for t in axis.texts]
        found += [text for text, box in boxes if not inside.contains(box.x0, box.y0)]
        found += [text for text, box in boxes if not inside.contains(box.x1, box.y1)]
        for i, (text, box) in enumerate(boxes):
            found += [f"{text}/{other}" for other, o in boxes[i + 1 :] if box.overlaps(o)]
        lines = [bars.errorbar.lines[2] for bars in axis.containers if getattr(bars, "errorbar", 0)]
        for segment in [s for group in lines for c in group for s in c.get_segments() if s.size]:
            (x, y0), (_, y1) = axis.transData.transform(segment)  # a vertical line
            found += [
                f"{text} on an error bar"
                for text, box in boxes
                if box.x0 < x < box.x1 and min(y0, y1) < box.y1 and max(y0, y1) > box.y0
            ]
    return found


def error_bars(axis) -> int:
    """How many error bars the panel draws (their lines with finite ends)."""
    drawn = [bars.errorbar for bars in axis.containers if getattr(bars, "errorbar", None)]
    segments = [s for e in drawn for lines in e.lines[2] for s in lines.get_segments()]
    return sum(bool(segment.size and np.isfinite(segment).all()) for segment in segments)


def test_the_accuracy_picture_shows_paired_differences_with_intervals(
    two_trials, tmp_path, monkeypatch
):
    figure = drawn_report(two_trials, tmp_path / "report", monkeypatch)
    comparisons = pd.read_csv(tmp_path / "report" / "comparisons.csv")
    titles = [axis.get_title() for axis in figure.axes]
    differences = [axis for axis in figure.axes if axis.get_title().startswith("difference to ERM")]
    assert len(differences) == comparisons["selection_method"].nunique() >= 1
    assert all(t.endswith("error bars: 95% interval") for t in titles if "difference" in t)
    accuracy = [t for t in titles if "difference" not in t]
    assert all(t.endswith("mean over trials, error bars: standard error") for t in accuracy)
    # every test domain's bar of each algorithm, and each difference with its average
    assert [error_bars(axis) for axis in figure.axes] == [2 * 4, 5] * len(differences)
    panel = differences[0]
    first = comparisons[comparisons["selection_method"] == comparisons["selection_method"][0]]
    labels = [text.get_text() for text in panel.texts]
    assert [f"{d:+.1f}" for d in first["difference"]] == labels
    low, high = panel.get_ylim()
    span = max(first["ci_high"].max(), 0) - min(first["ci_low"].min(), 0)
    assert low <= first["ci_low"].min() and high >= first["ci_high"].max()
    assert high - low < 1.6 * span + 1  # the scale of the differences, not 0-100 accuracy
    assert values_overlap(figure) == []


def test_the_values_on_a_crowded_picture_neither_collide_nor_cross_error_bars(
    three_trials, tmp_path, monkeypatch
):
    figure = drawn_report(
        three_trials, tmp_path / "report", monkeypatch
    )  # six algorithms, intervals
    assert values_overlap(figure) == []
    assert [error_bars(axis) for axis in figure.axes] == [6 * 4, 5 * 5] * 2  # none on averages


def test_a_picture_of_one_trial_says_it_has_no_interval_and_draws_none(
    demo_sweep, tmp_path, monkeypatch
):
    figure = drawn_report(demo_sweep, tmp_path / "report", monkeypatch)  # one trial, six algorithms
    assert len(figure.axes) == 2 * 2 and all(
        axis.get_title().endswith("one trial: no interval") for axis in figure.axes
    )
    assert [error_bars(axis) for axis in figure.axes] == [0, 0, 0, 0]
    assert values_overlap(figure) == []
    markdown = (tmp_path / "report" / "results.md").read_text()
    assert re.search(r"\d \+/- 0\.0", markdown) is None  # collect_results' one-trial cell
    assert "(one trial)" in markdown and "one trial: no interval" in markdown


def test_no_record_field_becomes_a_path_outside_the_output_folders(demo_sweep, tmp_path):
    root = tmp_path / "a" / "b"
    sweep = small_sweep(demo_sweep, root / "sweep", ("ERM",))
    crafted = "../../../x"  # from the TensorBoard folder root/logs: tmp_path/x
    rewrite_records(sweep / "ERM_0", lambda r: {**r, "args": {**r["args"], "algorithm": crafted}})
    before = {p for p in tmp_path.rglob("*")}
    logs, output = root / "logs", root / "report"
    code, printed, _ = cli(
        "report", "--input_dir", str(sweep), "--output_dir", str(output), "--tensorboard", str(logs)
    )
    assert code == 0
    written = {p for p in tmp_path.rglob("*")} - before
    assert written and all(
        logs in p.parents or output in p.parents for p in written - {logs, output}
    )
    runs = sorted(
        str(p.parent.relative_to(logs)) for p in logs.rglob("events.*") if p.parent != logs
    )
    assert len(runs) == 4 and runs[0].startswith("%2E.%2F..%2F..%2Fx/RotatedDigits/test_env0/")
    assert crafted in pd.read_csv(output / "results.csv")["algorithm"].tolist()  # shown as it is


def test_runs_given_other_fixed_hparams_are_never_pooled(demo_sweep, tmp_path):
    """A sweep file changed (DMG's lr fixed at 0.05) and run again into the same folder: the
    same algorithm, seeds and test domains, other --hparams, 5 points worse everywhere."""
    sweep = small_sweep(demo_sweep, tmp_path / "sweep", ("DMG",))
    for env in range(4):
        copy = sweep / f"DMG_lr_{env}"
        shutil.copytree(sweep / f"DMG_{env}", copy)

        def given_lr(record, copy=copy):
            accuracies = {k: v - 0.05 for k, v in record.items() if k.endswith("_acc")}
            given = {**json.loads(record["args"]["hparams"] or "{}"), "lr": 0.05}
            args = {**record["args"], "hparams": json.dumps(given), "output_dir": str(copy)}
            return {**record, **accuracies, "args": args}

        rewrite_records(copy, given_lr)
    code, printed, _ = cli("report", "--input_dir", str(sweep), "--output_dir", str(tmp_path / "r"))
    assert code == 0
    results = pd.read_csv(tmp_path / "r" / "results.csv")
    cells = results[(results["test_env"] != "Avg") & results["accuracy"].notna()]
    assert set(cells["algorithm"]) == {"DMG", "DMG (lr=0.05)"}
    assert (cells["n_trials"] == 1).all()  # one run per cell: nothing pooled
    plain, given = (cells[cells["algorithm"] == name] for name in ("DMG", "DMG (lr=0.05)"))
    assert given["accuracy"].to_numpy() == pytest.approx(plain["accuracy"].to_numpy() - 5)
    assert "runs of one algorithm were given different --hparams (DMG: lr)" in printed
    drawn = {path.name for path in (tmp_path / "r").glob("*_diagnostics_*.png")}
    assert drawn == {f"{dmg}_diagnostics_RotatedDigits.png" for dmg in ("dmg", "dmg-lr-0.05")}
    # evaluate puts the two side by side, named as report names them
    code, printed, message = cli(
        *("evaluate", "--run_dir", str(sweep / "DMG_0"), str(sweep / "DMG_lr_0")),
        *("--output_dir", str(tmp_path / "e")),
    )
    assert code == 0, message
    table = pd.read_csv(tmp_path / "e" / "in_domain.csv")
    assert set(table["algorithm"]) == {"DMG", "DMG (lr=0.05)"}
    assert "DMG (lr=0.05) (predict)" in set(table["prediction"])


def test_selected_hparams_name_each_run_where_it_is_now(demo_sweep, tmp_path):
    sweep = small_sweep(demo_sweep, tmp_path / "moved", ("ERM",))  # records name the demo's
    code, _, _ = cli("report", "--input_dir", str(sweep), "--output_dir", str(tmp_path / "r"))
    assert code == 0
    selected = pd.read_csv(tmp_path / "r" / "selected_hparams.csv")
    assert set(selected["run"]) == {str(sweep / f"ERM_{env}") for env in range(4)}


def test_a_crafted_algorithm_name_adds_no_row_to_the_markdown_tables(demo_sweep, tmp_path):
    sweep = small_sweep(demo_sweep, tmp_path / "sweep")
    crafted = "ERM\n| Fake | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 |"
    for env in range(4):
        rewrite_records(
            sweep / f"ERM_{env}", lambda r: {**r, "args": {**r["args"], "algorithm": crafted}}
        )
    output = tmp_path / "r"
    code, printed, _ = cli("report", "--input_dir", str(sweep), "--output_dir", str(output))
    assert code == 0
    for name in ("results.md", "ranks.md"):
        rows = [line for line in (output / name).read_text().splitlines() if line.startswith("|")]
        assert rows and not any(line.startswith("| Fake") for line in rows), name
        assert sum(line.startswith("| ERM\\n\\| Fake") for line in rows) == sum(
            line.startswith("| DMG") for line in rows
        )


@pytest.mark.parametrize("command", ["report", "select", "evaluate"])
def test_a_run_folder_whose_name_is_not_utf8_is_named_by_its_bytes(demo_sweep, tmp_path, command):
    sweep = small_sweep(demo_sweep, tmp_path / "sweep", ("ERM",))
    odd = sweep / os.fsdecode(b"ERM_\xff\xfe")  # bytes no UTF-8 name has
    (sweep / "ERM_0").rename(odd)
    given = ("--run_dir", str(odd)) if command == "evaluate" else ("--input_dir", str(sweep))
    before = snapshot(sweep)
    code, printed, message = cli(command, *given, "--output_dir", str(tmp_path / "o"))
    assert code == 2 and printed == "" and "Traceback" not in message
    assert f"run folder {os.fsencode(odd)!r} has a name that is not valid UTF-8" in message
    assert f"mv $'{sweep}/ERM_\\xff\\xfe' NEW_NAME" in message
    assert snapshot(sweep) == before and not (tmp_path / "o").exists()


def test_a_folder_that_is_no_job_is_left_alone_whatever_its_name(demo_sweep, tmp_path):
    sweep = small_sweep(demo_sweep, tmp_path / "sweep", ("ERM",))
    other = sweep / os.fsdecode(b"notes_\xff")
    other.mkdir()
    (other / "plan.txt").write_text("not a job\n")
    code, _, _ = cli("report", "--input_dir", str(sweep), "--output_dir", str(tmp_path / "o"))
    assert code == 0
