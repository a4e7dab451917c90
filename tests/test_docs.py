"""The generated sections of README.md and docs/ match the code, and every `dmg-domainbed`
command line in them names a subcommand and flags the parser has."""

from pathlib import Path

import pytest

from .helpers import load_script, package_plugins

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def generate():
    import dmg_domainbed

    dmg_domainbed.register()
    return load_script(ROOT / "docs" / "generate.py")


def test_generated_sections_are_fresh(generate):
    assert generate.stale_sections() == [], "run python docs/generate.py"


def test_command_lines_in_the_docs_exist(generate):
    assert generate.unknown_options() == []


def test_every_algorithm_command_and_launcher_of_the_package_is_documented(generate):
    """A new algorithm, subcommand or launcher cannot ship without its generated section."""
    import argparse

    from dmg_domainbed import integration

    leaves = {
        name
        for name, parser in generate.subcommands().items()
        if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
    }
    expected = {
        *(f"hparams {name}" for name in package_plugins(integration.ALGORITHM_GROUP)),
        *(f"launcher {name}" for name in package_plugins(integration.LAUNCHER_GROUP)),
        *(f"cli {name}" for name in leaves),
        "sweep-keys",
    }
    found = {
        match.group("name")
        for page in generate.PAGES
        for match in generate.SECTION.finditer(page.read_text())
    }
    assert sorted(expected - found) == []


def test_a_nested_subcommand_has_its_own_reference(generate):
    assert "--manifest FILE" in generate.render("cli data check")


def test_a_stale_section_and_an_unknown_flag_are_caught(generate, tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- generated: launcher local_parallel -->\nold\n"
        "<!-- end of generated: launcher local_parallel -->\n"
        "Run `dmg-domainbed demo --steps 5 --step 5` or `dmg-domainbed sweeps FILE`.\n"
        "Check `dmg-domainbed data check --data_dir D --quick --quik`.\n"
    )
    generate.ROOT = tmp_path
    assert generate.stale_sections([page]) == ["page.md: launcher local_parallel"]
    assert [p.split(": ")[-1] for p in generate.unknown_options([page])] == [
        "demo has no --step",
        "no subcommand 'sweeps'",
        "data check has no --quik",
    ]
    page.write_text(generate.regenerate(page.read_text()))
    assert generate.stale_sections([page]) == []
