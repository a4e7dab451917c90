"""Registration into DomainBed: automatic in every process, any import order, nothing changed
for DomainBed's own algorithms, open to any package through entry points."""

import importlib
import io
import json
import sys
import textwrap
import unittest

import pytest

from dmg_domainbed.errors import UserError

from .helpers import (
    domainbed_env,
    domainbed_script,
    fresh_domainbed,
    one_loader_worker,
    run_python,
)
from .test_check_algorithm import install


def hparams_table(names: dict | None = None) -> str:
    """DomainBed's default and seeded random hparams of every algorithm on every dataset (those
    of ``names``, else every registered one), as JSON."""
    from domainbed import algorithms, datasets, hparams_registry

    own_algorithms = names["algorithms"] if names else algorithms.ALGORITHMS
    own_datasets = names["datasets"] if names else datasets.DATASETS
    table = {"names": {"algorithms": own_algorithms, "datasets": own_datasets}}
    for a in own_algorithms:
        for d in own_datasets:
            table[f"{a}/{d}/default"] = hparams_registry.default_hparams(a, d)
            table[f"{a}/{d}/seed 7"] = hparams_registry.random_hparams(a, d, 7)
    return json.dumps(table, sort_keys=True, default=repr)


def registered_and_reloaded(register=lambda: None) -> None:
    """The plugins are registered; DomainBed's modules reloaded (``register``: how the plugins
    are registered without the hook) have them registered once."""
    from domainbed import algorithms, command_launchers, datasets, hparams_registry

    assert "DMG" in algorithms.ALGORITHMS, algorithms.ALGORITHMS
    from domainbed.algorithms import DMG as registered  # an attribute, before any lookup

    assert algorithms.get_algorithm_class("DMG") is registered and registered.__name__ == "DMG"
    assert hparams_registry.default_hparams("DMG", "PACS")["lambda_overlap"] == 0.1
    register()
    for module in (algorithms, datasets, hparams_registry, command_launchers):
        importlib.reload(module)
    register()
    assert algorithms.ALGORITHMS.count("DMG") == 1, algorithms.ALGORITHMS
    assert algorithms.get_algorithm_class("DMG").__name__ == "DMG"
    assert datasets.DATASETS.count("RotatedDigits") == 1, datasets.DATASETS
    assert hparams_registry.default_hparams("DMG", "PACS")["lambda_overlap"] == 0.1
    assert "local_parallel" in command_launchers.REGISTRY


def test_domainbed_hparams_are_byte_identical_with_the_plugin_on_or_off_and_pass_its_own_test():
    with fresh_domainbed(hook=False):
        off = hparams_table()
    names = json.loads(off)["names"]
    assert "ERM" in names["algorithms"] and "DMG" not in names["algorithms"]
    assert len(json.loads(off)) > 1000
    with fresh_domainbed():
        on = hparams_table(names)
        # with the plugin on, DomainBed's own test of its hparams registry passes too
        from domainbed.test import test_hparams_registry

        registry_test = unittest.defaultTestLoader.loadTestsFromModule(test_hparams_registry)
        ran = unittest.TextTestRunner(stream=io.StringIO()).run(registry_test)
    assert on == off
    assert ran.wasSuccessful() and ran.testsRun > 0


def test_start_up_hook_is_installed_without_importing_torch():
    """What the ``.pth`` line does at a new interpreter's start: a process of its own."""
    code = (
        "import sys; print(any(type(f).__name__ == 'DomainBedImportWatcher' "
        "for f in sys.meta_path), 'torch' in sys.modules)"
    )
    assert run_python("-c", code).stdout.split() == ["True", "False"]
    disabled = run_python("-c", code, env=domainbed_env(DMG_DOMAINBED_DISABLE="1"))
    assert disabled.stdout.split() == ["False", "False"]


def domainbed_first_then_the_hook(monkeypatch):
    """DomainBed imported before the hook is armed (switched off at start-up, armed later)."""
    import domainbed.algorithms
    import domainbed.datasets  # noqa: F401

    monkeypatch.setenv("DMG_DOMAINBED_DISABLE", "0")
    importlib.import_module("dmg_domainbed._startup").install()


@pytest.mark.parametrize(
    "first",
    [
        "domainbed.hparams_registry",
        "domainbed.algorithms",
        "domainbed.datasets",
        "dmg_domainbed.algorithms.dmg.dmg",
        domainbed_first_then_the_hook,
    ],
    ids=lambda first: first if isinstance(first, str) else "hook armed late",
)
def test_registration_works_in_any_import_order_and_survives_a_reload(first, monkeypatch, capsys):
    late = not isinstance(first, str)
    monkeypatch.setenv("DMG_DOMAINBED_DISABLE", "1" if late else "")
    with fresh_domainbed(hook=not late):
        if late:
            first(monkeypatch)
        else:
            importlib.import_module(first)
        registered_and_reloaded()
    assert "dmg-domainbed:" not in capsys.readouterr().err


def test_explicit_register_without_the_hook_is_idempotent_and_survives_a_reload(capsys):
    with fresh_domainbed(hook=False):
        from domainbed import algorithms, hparams_registry

        import dmg_domainbed

        assert "DMG" not in algorithms.ALGORITHMS
        dmg_domainbed.register()
        first = hparams_registry.random_hparams("DMG", "PACS", 3)
        dmg_domainbed.register()
        assert algorithms.ALGORITHMS.count("DMG") == 1
        assert hparams_registry.random_hparams("DMG", "PACS", 3) == first
        ours = sorted(set(algorithms.ALGORITHMS) & {"DMG", "MultiHead", "Aggregate"})
        assert ours == ["Aggregate", "DMG", "MultiHead"]
        registered_and_reloaded(register=dmg_domainbed.register)
    assert "dmg-domainbed:" not in capsys.readouterr().err


TINY_PLUGIN = {
    "pyproject.toml": """
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"

        [project]
        name = "tiny-dg-plugin"
        version = "0.0.1"

        [project.entry-points."domainbed.algorithms"]
        TinyERM = "tiny_dg_plugin:TinyERM"
        Broken = "tiny_dg_plugin.missing:Nothing"
        """,
    "tiny_dg_plugin/__init__.py": """
        from domainbed.algorithms import ERM


        class TinyERM(ERM):
            HPARAMS = {"tiny_scale": (2.0, lambda r: float(r.uniform(1, 3)))}

            def update(self, minibatches, unlabeled=None):
                result = super().update(minibatches, unlabeled)
                result["tiny_scale"] = self.hparams["tiny_scale"]
                return result
        """,
}


def test_any_installed_package_adds_an_algorithm_through_an_entry_point(tmp_path, capsys):
    site = install(TINY_PLUGIN, tmp_path)
    out = tmp_path / "run"
    args = ["--algorithm", "TinyERM", "--dataset", "Debug28", "--steps", "2"]
    args += ["--hparams", '{"batch_size": 8}', "--output_dir", str(out)]
    with fresh_domainbed(site), one_loader_worker():
        printed = domainbed_script("train", *args)
    assert (out / "done").exists()
    record = json.loads((out / "results.jsonl").read_text().splitlines()[-1])
    assert record["hparams"]["tiny_scale"] == 2.0 and record["tiny_scale"] == 2.0
    # the broken entry point is reported once, clearly, and stops nothing
    reported = printed + capsys.readouterr().err
    assert reported.count("skipping DomainBed plugin 'Broken") == 1
    assert "tiny_dg_plugin.missing" in reported


def test_a_test_env_out_of_range_stops_train_before_any_step_naming_the_domains(tmp_path):
    out = tmp_path / "run"
    args = ["--algorithm", "DMG", "--dataset", "RotatedDigits", "--test_envs", "7"]
    with pytest.raises(UserError) as refused:
        domainbed_script("train", *args, "--output_dir", str(out))
    error = "test environment 7 (--test_envs 7): RotatedDigits has 4 domains"
    assert str(refused.value).startswith(error)
    assert "test_envs are numbers 0 to 3" in str(refused.value)
    assert not (out / "results.jsonl").exists()


def test_a_test_env_out_of_range_of_domainbed_s_own_dataset_stops_train_before_its_data(
    tmp_path, monkeypatch
):
    from domainbed import datasets

    def built(*args, **kwargs):
        raise AssertionError("the dataset was built before --test_envs were checked")

    monkeypatch.setattr(datasets.Debug28, "__init__", built)
    out = tmp_path / "run"
    args = ["--algorithm", "ERM", "--dataset", "Debug28", "--test_envs", "0", "3"]
    args += ["--hparams", '{"batch_size": 8}']  # a batch its 13 training examples fill
    with one_loader_worker(), pytest.raises(UserError) as refused:
        domainbed_script("train", *args, "--output_dir", str(out))
    error = "test environment 3 (--test_envs 0 3): Debug28 has 3 domains (0: '0', 1: '1', 2: '2')"
    assert str(refused.value).startswith(error)
    assert not (out / "results.jsonl").exists()


@pytest.fixture
def fake_plugins(monkeypatch, tmp_path):
    """Entry points of group ``test.group`` on modules written into ``tmp_path``."""
    import importlib
    import sys
    from importlib import metadata

    from dmg_domainbed import integration

    points: dict[str, metadata.EntryPoint] = {}
    real = integration.entry_points
    monkeypatch.setattr(
        integration, "entry_points", lambda group: points if group == "test.group" else real(group)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(integration, "_loaded", {})
    monkeypatch.setattr(integration, "_failures", {})
    monkeypatch.setattr(integration, "_not_yet", set())
    monkeypatch.setattr(sys, "modules", dict(sys.modules))

    def add(name: str, value: str, files: dict[str, str]) -> None:
        for path, text in files.items():
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(textwrap.dedent(text))
        importlib.invalidate_caches()
        points[name] = metadata.EntryPoint(name, value, "test.group")

    return add


def test_a_plugin_that_asks_for_itself_while_importing_gets_none_then_loads(fake_plugins):
    from dmg_domainbed import integration

    fake_plugins(
        "Thing",
        "reentrant_plugin:Thing",
        {
            "reentrant_plugin.py": """
                from dmg_domainbed import integration
                DURING_IMPORT = integration.load("test.group", "Thing")
                class Thing: pass
                """
        },
    )
    thing = integration.load("test.group", "Thing")
    assert thing.__name__ == "Thing"
    assert __import__("reentrant_plugin").DURING_IMPORT is None


def test_a_plugin_whose_package_is_half_imported_loads_later_unreported(fake_plugins, capsys):
    """The package imports DomainBed (here: asks for the plugin) before it defines what the
    plugin's module imports from it: not a failure, only "not yet"."""
    from dmg_domainbed import integration

    fake_plugins(
        "Half",
        "halfway_plugin.algo:Thing",
        {
            "halfway_plugin/__init__.py": """
                from dmg_domainbed import integration
                DURING_IMPORT = integration.load("test.group", "Half")
                HELPER = 1
                """,
            "halfway_plugin/algo.py": "from halfway_plugin import HELPER\nclass Thing: pass\n",
        },
    )
    assert __import__("halfway_plugin").DURING_IMPORT is None
    assert "Half" not in capsys.readouterr().err
    assert integration.require("test.group", "Half").__name__ == "Thing"


def test_a_missing_dependency_met_while_the_package_imports_is_reported_and_raises(
    fake_plugins, capsys
):
    """Another module of the plugin's package is being imported (a command's module that
    imports DomainBed) when the plugin's own import fails on a missing dependency: reported at
    once, and raised when asked for by name."""
    from dmg_domainbed import integration

    fake_plugins(
        "Needy",
        "needy_plugin.algo:Thing",
        {
            "needy_plugin/__init__.py": "",
            "needy_plugin/command.py": """
                from dmg_domainbed import integration
                DURING_IMPORT = integration.load("test.group", "Needy")
                """,
            "needy_plugin/algo.py": "import a_dependency_nobody_installed\nclass Thing: pass\n",
        },
    )
    __import__("needy_plugin.command")
    err = capsys.readouterr().err
    assert "skipping DomainBed plugin 'Needy = needy_plugin.algo:Thing'" in err
    assert "No module named 'a_dependency_nobody_installed'" in err
    with pytest.raises(integration.PluginImportError, match="a_dependency_nobody_installed"):
        integration.require("test.group", "Needy")


def test_a_failure_of_an_imported_package_is_retried_and_require_raises(fake_plugins, tmp_path):
    import importlib

    from dmg_domainbed import integration

    fake_plugins("Late", "late_plugin.late:Thing", {"late_plugin/__init__.py": ""})
    importlib.import_module("late_plugin")  # the package is imported, its module not there yet
    assert integration.load("test.group", "Late") is None
    assert ("test.group", "Late") not in integration._loaded
    with pytest.raises(integration.PluginImportError, match="No module named 'late_plugin.late'"):
        integration.require("test.group", "Late")
    (tmp_path / "late_plugin" / "late.py").write_text("class Thing: pass\n")
    importlib.invalidate_caches()
    assert integration.require("test.group", "Late").__name__ == "Thing"


def test_a_failure_of_a_package_not_imported_before_is_final(fake_plugins):
    from dmg_domainbed import integration

    fake_plugins("Gone", "gone_plugin_nobody_wrote:Thing", {})
    assert integration.load("test.group", "Gone") is None
    assert integration._loaded[("test.group", "Gone")] is None
    with pytest.raises(integration.PluginImportError, match="gone_plugin_nobody_wrote"):
        integration.require("test.group", "Gone")


def test_another_packages_entry_point_cannot_take_this_packages_name(monkeypatch, tmp_path, capsys):
    """A package first on ``sys.path`` that declares ``DMG`` (and ``ERM``) does not replace
    this package's DMG (nor DomainBed's ERM): the names stay what they are, and the entry
    points refused are named once on stderr."""
    from domainbed import algorithms

    from dmg_domainbed import integration

    info = tmp_path / "squatter_plugin-0.1.dist-info"
    info.mkdir()
    # named as its metadata spells it; the refusal names it as pip does: squatter-plugin
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: Squatter_Plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[domainbed.algorithms]\nDMG = squatter_plugin:DMG\nERM = squatter_plugin:ERM\n"
    )
    (tmp_path / "squatter_plugin.py").write_text(
        "from domainbed import algorithms\n"
        "class DMG(algorithms.ERM): pass\n"
        "class ERM(algorithms.ERM): pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # first on sys.path: read before this package
    monkeypatch.setattr(integration, "_loaded", {})
    monkeypatch.setattr(integration, "_failures", {})
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    integration.entry_points.cache_clear()
    try:
        declared = integration.entry_points(integration.ALGORITHM_GROUP)
        assert declared["DMG"].value == "dmg_domainbed.algorithms.dmg.dmg:DMG"
        err = capsys.readouterr().err
        assert "'DMG = squatter_plugin:DMG' of group 'domainbed.algorithms' (from" in err
        assert "squatter-plugin) is not registered: 'DMG' is dmg-domainbed's own" in err
        assert "Rename the entry point in squatter-plugin" in err
        own = "dmg_domainbed.algorithms.dmg.dmg"
        assert algorithms.get_algorithm_class("DMG").__module__ == own
        assert algorithms.get_algorithm_class("ERM").__module__ == "domainbed.algorithms"
        err = capsys.readouterr().err
        assert "plugin algorithm 'ERM' (group 'domainbed.algorithms') is not registered" in err
        assert "DomainBed already has an algorithm of that name" in err
    finally:
        monkeypatch.undo()
        integration.entry_points.cache_clear()


def table_names() -> set[str]:
    """The first column of the table that opens integration.py's docstring."""
    from dmg_domainbed import integration

    lines = integration.__doc__.splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("=====")]
    body = lines[rules[1] + 1 : rules[2]]
    return {line.split()[0] for line in body if line and not line[0].isspace()}


def _held(value):
    """What a name holds: the object, and for a list or dict a copy of its contents."""
    return value, (list(value) if isinstance(value, list) else dict(value))


def names_and_values(modules) -> dict:
    """Every name of DomainBed's ``modules`` and of the classes they define, and the two of
    ``sys`` a package may write, with what each holds."""
    found = {"sys.meta_path": _held(sys.meta_path), "sys.excepthook": (sys.excepthook, {})}
    for module in modules:
        prefix = module.__name__.removeprefix("domainbed.")
        for name, value in vars(module).items():
            found[f"{prefix}.{name}"] = _held(value) if isinstance(value, list | dict) else (value,)
            if isinstance(value, type) and value.__module__ == module.__name__:
                for attribute, member in vars(value).items():
                    found[f"{prefix}.{name}.{attribute}"] = (member,)
    return found


def changed_rows(before: dict, after: dict, datasets, manifests: set[str]) -> set[str]:
    """The table's names for what changed from ``before`` to ``after``: an entry point's name
    as ``<plugin>``, a manifest's as ``<manifest>``, a class of DomainBed's dataset family as
    ``<dataset>``."""
    from dmg_domainbed import integration

    rows = set()
    for key in set(before) | set(after):
        old, new = before.get(key), after.get(key)
        if old is not None and new is not None and old[0] is new[0] and old[1:] == new[1:]:
            continue
        module, name, *attribute = key.split(".")
        if attribute and f"{module}.{name}" not in before:
            continue  # a class that registration added, with everything in it
        if name in integration.entry_points(f"domainbed.{module}"):
            name = "<plugin>"
        elif name in manifests:
            name = "<manifest>"
        elif attribute and module == "datasets" and name != "MultipleDomainDataset":
            if issubclass(getattr(datasets, name), datasets.MultipleDomainDataset):
                name = "<dataset>"
        rows.add(".".join([module, name, *attribute]))
    return rows


@pytest.fixture
def domainbed_as_defined(monkeypatch):
    """DomainBed's modules imported afresh, as DomainBed defines them (no start-up hook, no
    setting of this package, Python's own ``sys.excepthook``), and the process's own put back
    when the test ends."""
    import importlib

    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    for variable in ("DMG_DOMAINBED_DISABLE", "DMG_DOMAINBED_LOADER_WORKERS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("DMG_DOMAINBED_DATASETS", raising=False)
    with fresh_domainbed(hook=False):
        from dmg_domainbed import _startup

        yield [importlib.import_module(name) for name in sorted(_startup.WATCHED_MODULES)]


CONDITIONAL_ROWS = {"datasets.<manifest>", "datasets.<dataset>.N_WORKERS"}


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({}, lambda table: table - CONDITIONAL_ROWS),
        ({"DMG_DOMAINBED_LOADER_WORKERS": "2", "DMG_DOMAINBED_DATASETS": "manifest"}, set),
        ({"DMG_DOMAINBED_DISABLE": "1"}, lambda table: set()),
    ],
    ids=["no settings", "every setting", "disabled"],
)
def test_the_table_names_every_name_the_start_up_hook_changes_in_domainbed(
    domainbed_as_defined, settings, expected, monkeypatch, tmp_path
):
    """A patch without a row in integration.py's table, or a row without its patch, fails."""
    from dmg_domainbed import _startup

    for domain in ("north", "south"):
        (tmp_path / "images" / domain / "cat").mkdir(parents=True)
    (tmp_path / "table.toml").write_text('name = "TableData"\nroot = "images"\n')
    for variable, value in settings.items():
        value = str(tmp_path / "table.toml") if value == "manifest" else value
        monkeypatch.setenv(variable, value)
    datasets = sys.modules["domainbed.datasets"]
    before = names_and_values(domainbed_as_defined)
    _startup.install()
    after = names_and_values(domainbed_as_defined)
    changed = changed_rows(before, after, datasets, {"TableData"})
    assert changed == expected(table_names())


def test_disabled_an_explicit_register_writes_every_row_but_the_start_up_hooks(
    domainbed_as_defined,
):
    import dmg_domainbed

    datasets = sys.modules["domainbed.datasets"]
    before = names_and_values(domainbed_as_defined)
    dmg_domainbed.register()
    changed = changed_rows(before, names_and_values(domainbed_as_defined), datasets, set())
    assert changed == table_names() - CONDITIONAL_ROWS - {"sys.meta_path"}
