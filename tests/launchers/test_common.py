"""Launcher settings: read from environment variables, checked with clear messages."""

import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers.common import (
    Option,
    output_dir_of,
    read_options,
)

OPTIONS = (
    Option("gpus", "T_GPUS", int, 1, minimum=0, help="GPUs per job"),
    Option("mem_gb", "T_MEM", float, 32.0, minimum=0, help="memory"),
    Option("wait", "T_WAIT", bool, None, help="wait"),
    Option("cluster", "T_CLUSTER", str, "slurm", choices=("slurm", "local"), help="where"),
)


def test_values_come_from_the_environment_else_the_default():
    env = {"T_GPUS": "2", "T_MEM": "7.5", "T_WAIT": "yes", "T_CLUSTER": ""}
    values = read_options(OPTIONS, env)
    assert values == {"gpus": 2, "mem_gb": 7.5, "wait": True, "cluster": "slurm"}


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"T_GPUS": "one"}, "T_GPUS = 'one' is not valid: it must be an integer >= 0, not str"),
        ({"T_GPUS": "-1"}, "T_GPUS = -1 is not valid: it must be an integer >= 0"),
        ({"T_WAIT": "maybe"}, "it must be true or false"),
        ({"T_CLUSTER": "pbs"}, "it must be one of 'slurm', 'local'"),
    ],
)
def test_bad_values_name_the_variable_and_what_is_allowed(env, expected):
    with pytest.raises(UserError, match=expected):
        read_options(OPTIONS, env)


def test_values_from_a_sweep_file_keep_their_type_checks():
    gpus, mem = OPTIONS[0], OPTIONS[1]
    assert mem.check(16, "[launcher] mem_gb") == 16.0
    with pytest.raises(UserError, match=r"\[launcher\] gpus = True"):
        gpus.check(True, "[launcher] gpus")


@pytest.mark.parametrize(
    "command, expected",
    [
        (
            "python -m domainbed.scripts.train --dataset PACS --output_dir /s/ab12 --seed 3",
            "/s/ab12",
        ),
        ("python -m domainbed.scripts.train --output_dir='/s/with space'", "/s/with space"),
        ("python -m domainbed.scripts.train --dataset PACS", None),
    ],
)
def test_output_dir_is_read_from_domainbed_commands(command, expected):
    assert output_dir_of(command) == expected


def test_a_plain_launcher_function_gets_the_defaults_and_the_sweep_s_variables_on_each_command():
    import os

    from dmg_domainbed.launchers.common import Launcher, as_launcher

    given = []
    launcher = as_launcher(given.extend)
    assert isinstance(launcher, Launcher) and as_launcher(launcher) is launcher
    assert launcher.options == () and launcher.check(os.environ) is None
    assert launcher.running_jobs([], os.environ) == {}
    launcher.launch(["python -m x"], os.environ)
    launcher.launch(["python -m x"], {**os.environ, "DMG_X": "a b"})
    assert given == ["python -m x", "env 'DMG_X=a b' python -m x"]
    assert "DMG_X" not in os.environ
