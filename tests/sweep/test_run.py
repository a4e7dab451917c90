"""The sweep as one library call: a script runs a sweep file as ``dmg-domainbed sweep`` does,
and is handed what a user is shown."""

from pathlib import Path

from dmg_domainbed.sweep.run import SweepRequest, run_sweep

SWEEPS = Path(__file__).parents[2] / "sweeps"


def test_a_dry_run_passes_its_summary_and_jobs_to_echo_and_creates_nothing(tmp_path, capsys):
    out, lines = tmp_path / "sweep", []
    request = SweepRequest(
        SWEEPS / "demo.toml",
        data_dir=str(tmp_path),
        output_dir=str(out),
        dry_run=True,
        commands=True,
    )

    assert run_sweep(request, echo=lines.append) == 0

    summary, *_, listed, end = lines
    assert summary.startswith(f"Sweep {SWEEPS / 'demo.toml'}: 96 job(s): 96 to launch, 0 done")
    assert f"  output_dir: {out}" in summary.splitlines()
    assert listed.startswith("Jobs to launch:\n  python -m domainbed.scripts.train ")
    assert listed.count("python -m domainbed.scripts.train ") == 96
    assert end == "Dry run: nothing was created or launched."
    assert any(line.startswith("Cost of the jobs to launch") for line in lines)
    assert capsys.readouterr().out == ""  # everything went to echo
    assert not out.exists()
