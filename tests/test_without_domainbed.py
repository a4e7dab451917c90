"""Without DomainBed, the pure-maths tests still run and everything else fails with set-up help."""

import re
from pathlib import Path

from .helpers import domainbed_env, run_python

ROOT = Path(__file__).parents[1]


def test_pure_maths_runs_and_the_rest_fails_with_the_set_up_instructions(tmp_path):
    # A folder first on the path whose 'domainbed' cannot be imported hides the real one.
    hidden = tmp_path / "hide" / "domainbed"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ImportError("DomainBed is hidden")\n')
    env = domainbed_env(PYTHONPATH=str(hidden.parent))
    pure = "tests/algorithms/dmg/test_masks.py"
    needs_domainbed = "tests/algorithms/paper_baselines/test_aggregate.py"
    result = run_python(
        *("-m", "pytest", "-q", "-rA"),  # -rA: a line per test, PASSED <pure>::<test>
        *("-p", "no:cacheprovider", "-n", "0"),
        *(pure, needs_domainbed, "tests/cli/test_report.py"),
        cwd=ROOT,
        env=env,
        check=False,
    )
    summary = result.stdout.splitlines()[-1]
    assert result.returncode != 0, result.stdout
    # every test of the pure file ran and passed, and no other test passed
    pure_results = re.findall(rf"^(\w+) {re.escape(pure)}::", result.stdout, flags=re.M)
    assert pure_results and set(pure_results) == {"PASSED"}, result.stdout
    n_pure = len(pure_results)
    assert re.search(rf"\b{n_pure} passed", summary), summary
    # test_aggregate fails at collection, every test of test_report at set-up; none runs and fails.
    errors = re.search(r"\b(\d+) errors?\b", summary)
    assert errors and int(errors.group(1)) >= 2, summary
    assert "failed" not in summary, summary
    assert "dmg-domainbed install-domainbed" in result.stdout
    assert "DomainBed is hidden" in result.stdout
