"""``dmg-domainbed report`` gives collect_results' numbers, as CSV, Markdown and pictures."""

import re
import shutil

import pandas as pd
import pytest

from tests.helpers import DEMO_ALGORITHMS, cli, run_domainbed, runs_of, snapshot

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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


@pytest.fixture(scope="module")
def report(demo_sweep, tmp_path_factory):
    output = tmp_path_factory.mktemp("report")
    before = snapshot(demo_sweep)
    code, printed, _ = cli("report", "--input_dir", str(demo_sweep), "--output_dir", str(output))
    assert code == 0
    return output, printed, before == snapshot(demo_sweep)


def test_report_numbers_are_collect_results_numbers(report, demo_sweep):
    output, _, _ = report
    expected = collect_results_tables(
        run_domainbed("collect_results", "--input_dir", str(demo_sweep)).stdout
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
            assert mine["text"].tolist() == cells
            compared += len(cells)
        table = expected[f"Averages, model selection method: {method}"]
        header = table.pop("Algorithm")
        for algorithm, cells in table.items():
            mine = averages[
                (averages["selection_method"] == method) & (averages["algorithm"] == algorithm)
            ]
            assert mine["dataset"].tolist() == header
            assert mine["text"].tolist() == cells
    assert compared == 3 * len(DEMO_ALGORITHMS) * 5
    assert (results["text"] != "X").any()


def test_report_writes_markdown_and_pictures_and_leaves_the_sweep_alone(report):
    output, printed, sweep_unchanged = report
    assert sweep_unchanged
    markdown = (output / "results.md").read_text()
    assert "## Model selection: training-domain validation set" in markdown
    assert "| Algorithm | 0 | 30 | 60 | 90 | Avg |" in markdown
    assert markdown in printed
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
