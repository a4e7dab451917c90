"""``dmg-domainbed report`` gives collect_results' numbers, as CSV, Markdown and pictures."""

import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pandas as pd
import pytest

from tests.helpers import DEMO_ALGORITHMS, DEMO_STEPS, cli, domainbed_script, runs_of, snapshot

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TENSORBOARD = "tensor board"  # a folder name a shell splits in two unless it is quoted


def collect_results_tables(printed: str) -> dict[str, dict[str, list[str]]]:
    """collect_results' text tables: header line -> {first cell: other cells}."""
    tables: dict[str, dict[str, list[str]]] = {}
    current = None
    for line in printed.splitlines():
        if line.startswith("-------- "):
            current = tables.setdefault(line[len("-------- ") :].strip(), {})
        elif current is not None and line.strip():
            cells = re.split(r"\s{2,}", line.strip())
            current[cells[0]] = cells[1:]
    return tables


def as_collect_results_prints(rows: pd.DataFrame) -> list[str]:
    """The report's cell texts (read as text) as collect_results prints them: it gives a cell of
    one trial a standard error of 0.0, which the report leaves out."""
    one = rows["n_trials"].eq("1")
    assert not rows.loc[one, "text"].str.contains(r"\+/-").any()
    return [f"{t} +/- 0.0" if o else t for t, o in zip(rows["text"], one, strict=True)]


@pytest.fixture(scope="module")
def report(demo_sweep, tmp_path_factory):
    output = tmp_path_factory.mktemp("report")
    before = snapshot(demo_sweep)
    code, printed, _ = cli(
        "report",
        "--input_dir",
        str(demo_sweep),
        "--output_dir",
        str(output),
        "--tensorboard",
        str(output / TENSORBOARD),
    )
    assert code == 0
    return output, printed, before == snapshot(demo_sweep)


def test_report_numbers_are_collect_results_numbers(report, demo_sweep):
    output, _, _ = report
    expected = collect_results_tables(
        domainbed_script("collect_results", "--input_dir", str(demo_sweep))
    )
    results = pd.read_csv(output / "results.csv", dtype=str)
    averages = pd.read_csv(output / "averages.csv", dtype=str)
    methods = results["selection_method"].unique()
    assert len(methods) == 3
    compared = 0
    for method in methods:
        table = expected[f"Dataset: RotatedDigits, model selection method: {method}"]
        header = table.pop("Algorithm")
        assert set(table) == set(DEMO_ALGORITHMS)
        for algorithm, cells in table.items():
            mine = results[
                (results["selection_method"] == method) & (results["algorithm"] == algorithm)
            ]
            assert mine["test_domain"].tolist() == header
            assert as_collect_results_prints(mine) == cells
            compared += len(cells)
        table = expected[f"Averages, model selection method: {method}"]
        header = table.pop("Algorithm")
        for algorithm, cells in table.items():
            mine = averages[
                (averages["selection_method"] == method) & (averages["algorithm"] == algorithm)
            ]
            assert mine["dataset"].tolist() == header
            assert as_collect_results_prints(mine) == cells
    assert compared == 3 * len(DEMO_ALGORITHMS) * 5
    assert (results["text"] != "X").any()


def test_report_writes_markdown_and_pictures_and_leaves_the_sweep_alone(report):
    output, printed, sweep_unchanged = report
    assert sweep_unchanged
    markdown = (output / "results.md").read_text()
    assert "## Model selection: training-domain validation set" in markdown
    assert "| Algorithm | 0 | 30 | 60 | 90 | Avg |" in re.sub(" +", " ", markdown)
    assert markdown in printed
    # Leave-one-domain-out has no result in a sweep of single test domains: one line, no X.
    assert "## Model selection: leave-one-domain-out" not in markdown
    assert "| X |" not in markdown
    assert (
        "Model selection leave-one-domain-out cross-validation: no result for any cell: it "
        "validates on runs that hold out two domains"
    ) in markdown
    assert "single_test_envs = false" in markdown
    assert "Precision" not in printed and "(fp32)" not in printed  # an all-fp32 sweep as before
    for name in ("accuracy_RotatedDigits.png", "dmg_diagnostics_RotatedDigits.png"):
        assert (output / name).read_bytes().startswith(PNG_SIGNATURE)


def test_report_of_a_folder_without_runs_fails_with_a_clear_message(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, message = cli("report", "--input_dir", str(empty), "--output_dir", str(tmp_path / "o"))
    assert code == 2
    assert f"no training runs in '{empty}'" in message and "results.jsonl" in message
    assert list(empty.iterdir()) == [] and not (tmp_path / "o").exists()

    missing = tmp_path / "missing"
    code, _, message = cli("report", "--input_dir", str(missing))
    assert code == 2 and "does not exist" in message


def test_report_of_one_run_folder_points_to_its_parent(demo_sweep, tmp_path):
    run = runs_of(demo_sweep)[("DMG", 0)]
    code, _, message = cli("report", "--input_dir", str(run), "--output_dir", str(tmp_path / "o"))
    assert code == 2
    assert "It is a single run; give the folder that holds the runs" in message


def test_report_refuses_to_write_inside_the_sweep(demo_sweep):
    before = snapshot(demo_sweep)
    code, _, message = cli(
        "report", "--input_dir", str(demo_sweep), "--output_dir", str(demo_sweep / "report")
    )
    assert code == 2 and "lies inside the input folder" in message
    assert snapshot(demo_sweep) == before


def test_a_half_written_last_line_is_left_out_with_a_warning(report, demo_sweep, tmp_path):
    sweep = tmp_path / "sweep"
    shutil.copytree(demo_sweep, sweep)
    torn = runs_of(sweep)[("DMG", 1)] / "results.jsonl"
    with open(torn, "a") as stream:
        stream.write('{"args": {"algorithm": "DMG", "data')
    code, _, message = cli("report", "--input_dir", str(sweep), "--output_dir", str(tmp_path / "o"))
    assert code == 0
    assert f"'{torn}': its last line is half-written" in message
    expected = pd.read_csv(report[0] / "results.csv")
    assert pd.read_csv(tmp_path / "o" / "results.csv").equals(expected)


def test_selected_hparams_are_the_runs_behind_collect_results_numbers(report, demo_sweep):
    output, _, _ = report
    table = pd.read_csv(output / "selected_hparams.csv")
    as_text = pd.read_csv(output / "selected_hparams.csv", dtype=str, keep_default_na=False)
    results = pd.read_csv(output / "results.csv")
    results = results[results["test_env"] != "Avg"].astype({"test_env": int})
    assert set(table["selection_method"]) == {
        "training-domain validation set",
        "test-domain validation set (oracle)",
    }
    merged = table.merge(results, on=["selection_method", "algorithm", "test_env"])
    assert len(merged) == len(table) == 2 * 4 * len(DEMO_ALGORITHMS)
    assert (merged["accuracy_x"] - merged["accuracy_y"]).abs().max() < 1e-9
    for (algorithm, test_env), run in runs_of(demo_sweep).items():
        records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
        rows = table[(table["algorithm"] == algorithm) & (table["test_env"] == test_env)]
        for index, row in rows.iterrows():
            assert row["run"] == records[0]["args"]["output_dir"]
            assert row["hparams_seed"] == 0 and row["trial_seed"] == 0
            for name, value in records[0]["hparams"].items():
                assert as_text.loc[index, name] == str(value), name
            record = next(r for r in records if r["step"] == row["step"])
            assert 100 * record[f"env{test_env}_in_acc"] == pytest.approx(row["accuracy"])


def test_comparisons_pair_every_algorithm_with_erm(report):
    output, printed, _ = report
    comparisons = pd.read_csv(output / "comparisons.csv", dtype={"test_env": str})
    results = pd.read_csv(output / "results.csv", dtype={"test_env": str})
    dmg = comparisons[
        (comparisons["algorithm"] == "DMG")
        & (comparisons["selection_method"] == "training-domain validation set")
    ]
    assert list(dmg["test_domain"]) == ["0", "30", "60", "90", "Avg"]
    assert (dmg["reference"] == "ERM").all() and (dmg["n_trials"] == 1).all()
    # One trial: the difference of the two cells, no interval, no verdict.
    iid = results[results["selection_method"] == "training-domain validation set"]
    cells = iid.pivot(index="test_env", columns="algorithm", values="accuracy")
    for _, row in dmg[dmg["test_env"] != "Avg"].iterrows():
        expected = cells.loc[row["test_env"], "DMG"] - cells.loc[row["test_env"], "ERM"]
        assert row["difference"] == pytest.approx(expected)
    assert dmg["ci_low"].isna().all() and (dmg["verdict"] == "one trial").all()
    assert set(comparisons["algorithm"]) == set(DEMO_ALGORITHMS) - {"ERM"}
    markdown = (output / "comparisons.md").read_text()
    assert "## RotatedDigits, model selection: training-domain validation set (reference: ERM)" in (
        markdown
    )
    assert "DMG vs ERM: " in printed and "one trial: no interval" in printed


def test_ranks_over_four_tasks_say_why_there_is_no_friedman_test(report):
    output, printed, _ = report
    ranks = pd.read_csv(output / "ranks.csv")
    assert (ranks["n_tasks"] == 4).all() and ranks["friedman_p"].isna().all()
    assert sorted(ranks["average_rank"].groupby(ranks["selection_method"]).sum()) == [21, 21]
    assert "Friedman test and critical-difference diagram left out" in printed
    assert not (output / "ranks.png").exists()


def test_an_unknown_reference_is_refused_before_anything_is_written(demo_sweep, tmp_path):
    output = tmp_path / "o"
    code, _, message = cli(
        "report", "--input_dir", str(demo_sweep), "--output_dir", str(output), "--reference", "X"
    )
    assert code == 2
    assert "--reference 'X' is not an algorithm of the sweep" in message and "ERM" in message
    assert not output.exists()


def test_one_sweep_given_twice_is_refused_before_anything_is_written(demo_sweep, tmp_path):
    output = tmp_path / "o"
    sweep = str(demo_sweep)
    code, _, message = cli("report", "--input_dir", sweep, sweep, "--output_dir", str(output))
    assert code == 2 and "are one job" in message and "Give each sweep once" in message
    assert not output.exists()


def test_tensorboard_into_a_folder_with_files_is_refused(demo_sweep, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "events.out.tfevents.1").write_text("earlier export")
    output = tmp_path / "o"
    code, _, message = cli(
        "report",
        "--input_dir",
        str(demo_sweep),
        "--output_dir",
        str(output),
        "--tensorboard",
        str(logs),
    )
    assert code == 2 and "is not empty" in message
    assert not output.exists() and [p.name for p in logs.iterdir()] == ["events.out.tfevents.1"]


def test_the_printed_tensorboard_command_names_the_folder_as_a_shell_reads_it(report):
    output, printed, _ = report
    line = next(line for line in printed.splitlines() if "tensorboard --logdir" in line)
    assert shlex.split(line) == ["tensorboard", "--logdir", str(output / TENSORBOARD)]


def test_tensorboard_logs_read_back_with_tensorboards_event_reader(report, demo_sweep):
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    logs = report[0] / TENSORBOARD
    selected = pd.read_csv(report[0] / "selected_hparams.csv")
    runs = runs_of(demo_sweep)
    names = sorted(str(p.parent.relative_to(logs)) for p in logs.glob("*/*/*/*/events.*"))
    assert len(names) == len(runs)
    run = runs[("DMG", 1)]
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    (name,) = [n for n in names if n.startswith("DMG/RotatedDigits/test_env1/") and run.name in n]
    events = event_accumulator.EventAccumulator(str(logs / name), size_guidance={"scalars": 0})
    events.Reload()
    logged = events.Scalars("env1_in_acc")
    assert [e.step for e in logged] == [r["step"] for r in records]
    assert [e.value for e in logged] == pytest.approx([r["env1_in_acc"] for r in records])
    assert "mask_iou/classifier" in events.Tags()["scalars"]
    row = selected[
        (selected["algorithm"] == "DMG")
        & (selected["test_env"] == 1)
        & (selected["selection_method"] == "training-domain validation set")
    ].iloc[0]
    (metric,) = events.Scalars("selected_test_acc/training_domain_validation")
    assert (metric.step, metric.value) == (row["step"], pytest.approx(row["accuracy"] / 100))
    assert events.Scalars("selected/training_domain_validation")[0].value == 1.0
    content = events.PluginTagToContent(metadata.PLUGIN_NAME)[metadata.SESSION_START_INFO_TAG]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["algorithm"].string_value == "DMG"
    assert hparams["lr"].number_value == pytest.approx(records[0]["hparams"]["lr"])
    assert hparams["mask_lr"].number_value == pytest.approx(records[0]["hparams"]["mask_lr"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _fetch(url: str, body: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=10) as answer:
        return json.loads(answer.read())


def test_tensorboard_serves_the_runs_a_scalar_series_and_the_hparams_table(report, demo_sweep):
    logs = report[0] / TENSORBOARD
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(logs),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--load_fast",
            "false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}/data"
    try:
        expected = len(runs_of(demo_sweep))
        runs: list[str] = []
        deadline = time.monotonic() + 90
        while len([r for r in runs if r != "."]) < expected:
            assert server.poll() is None, server.stderr.read()
            assert time.monotonic() < deadline, f"TensorBoard listed {runs}"
            time.sleep(0.5)
            try:
                runs = _fetch(f"{base}/runs")
            except OSError:
                continue
        erm = next(r for r in runs if r.startswith("ERM/RotatedDigits/test_env0/"))
        query = urllib.parse.urlencode({"run": erm, "tag": "env0_in_acc"})
        series = _fetch(f"{base}/plugin/scalars/scalars?{query}")
        assert [step for _, step, _ in series] == [0, int(DEMO_STEPS) - 1]
        experiment = _fetch(f"{base}/plugin/hparams/experiment", {"experimentName": ""})
        hparams = {info["name"]: info for info in experiment["hparamInfos"]}
        assert set(hparams["algorithm"]["domainDiscrete"]) == set(DEMO_ALGORITHMS)
        assert {"lr", "mask_lr", "test_envs", "trial_seed"} <= set(hparams)
        metrics = {info["name"]["tag"] for info in experiment["metricInfos"]}
        assert "selected_test_acc/training_domain_validation" in metrics
        table = _fetch(
            f"{base}/plugin/hparams/session_groups",
            {
                "experimentName": "",
                "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS"],
                "colParams": [],
                "startIndex": 0,
                "sliceSize": 1000,
            },
        )
        assert table["totalSize"] == expected
        group = next(g for g in table["sessionGroups"] if g["name"] == erm)
        assert group["hparams"]["algorithm"] == "ERM" and group["hparams"]["test_envs"] == "0"
        values = {m["name"]["tag"]: m["value"] for m in group["metricValues"]}
        assert 0 <= values["selected_test_acc/training_domain_validation"] <= 1
        assert values["selected/training_domain_validation"] == 1.0
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_dmg_s_diagnostics_say_why_its_overlap_falls_then_rises(demo_sweep):
    from domainbed import algorithms, datasets
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dmg_domainbed.reporting.report import first_runs
    from dmg_domainbed.reporting.tables import load_sweep_records

    runs = first_runs(load_sweep_records(demo_sweep), "RotatedDigits", "DMG")
    environments = datasets.get_dataset_class("RotatedDigits").ENVIRONMENTS
    figure = algorithms.get_algorithm_class("DMG").training_curves(runs, environments)
    caption = figure._supxlabel
    text = " ".join(caption.get_text().split())
    assert "the soft IoU grows with the level of the mask probabilities" in text
    assert "The penalty (lambda_overlap = 0.1) lowers every mask probability" in text
    assert "the cross-entropy raises those of the units the network relies on" in text
    assert "does not mean that the domains use the same units" in text
    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw(renderer)
    shown = caption.get_window_extent(renderer)
    assert figure.bbox.contains(shown.x0, shown.y0) and figure.bbox.contains(shown.x1, shown.y1)
