"""Reading sinfo's answer, the defaults that fit a partition and the requests that do not, on
partitions unlike the single-node test cluster (GPU nodes, mixed nodes, time limits)."""

import pytest

from dmg_domainbed.launchers import slurm_partition as sp

SINFO = """\
gpu|up|2-00:00:00|UNLIMITED|32|257000|gpu:v100:4(S:0-1)|10
gpu|up|2-00:00:00|UNLIMITED|64|515000|gpu:a100:8(S:0-1),shard:16|2
cpu*|up|infinite|48|128|1030000|(null)|20
tiny|down|30:00|UNLIMITED|4|8000|(null)|1
"""


@pytest.mark.parametrize(
    "text, minutes",
    [
        ("infinite", None),
        ("UNLIMITED", None),
        ("30", 30),
        ("30:00", 30),
        ("10:30", 11),
        ("2:00:00", 120),
        ("1-00:00:00", 1440),
        ("2-12", 3600),
        ("1-01:30", 1530),
    ],
)
def test_slurm_time_limits_in_minutes(text, minutes):
    assert sp.parse_minutes(text) == minutes


def test_sinfo_lines_become_partitions_of_node_kinds():
    partitions = sp.parse_sinfo(SINFO)
    assert list(partitions) == ["gpu", "cpu", "tiny"]
    gpu, cpu, tiny = partitions.values()
    assert [(k.count, k.cpus, k.gpus) for k in gpu.nodes] == [(10, 32, 4), (2, 64, 8)]
    assert gpu.max_time_min == 2880 and not gpu.default
    assert cpu.default and cpu.max_time_min is None
    assert cpu.nodes[0].cpus == 48  # the partition's MaxCPUsPerNode, under the node's 128
    assert cpu.nodes[0].memory_gb == 1005.8  # MB to GB, rounded down to 0.1
    assert tiny.max_time_min == 30
    assert tiny.describe() == (
        "partition tiny (1 node(s) of 4 CPUs, 7.8 GB, no GPU; time limit 30 min; down: no job "
        "starts until it is up)"
    )


def unset(**given):
    return {"gpus": None, "cpus": None, "mem_gb": None, "time_min": None, **given}


def test_defaults_fit_each_partition():
    gpu, cpu, tiny = sp.parse_sinfo(SINFO).values()
    assert sp.default_request(gpu, unset()) == sp.Request(1, 8, 32.0, 1440)
    assert sp.default_request(cpu, unset()) == sp.Request(0, 8, 32.0, 1440)
    # 4 CPUs: all of them, all the memory; the partition's 30 minutes.
    assert sp.default_request(tiny, unset()) == sp.Request(0, 4, 7.8, 30)
    # 8 GPUs: sized for the node that has them.
    assert sp.default_request(gpu, unset(gpus=8, cpus=64)).mem_gb == 32.0
    assert sp.default_request(tiny, unset(cpus=1)).mem_gb == 1.9  # a quarter of the node


def test_requests_that_cannot_run_name_every_setting_at_fault():
    partitions = sp.parse_sinfo(SINFO)
    gpu, cpu, tiny = partitions.values()
    assert sp.misfits(sp.Request(8, 64, 500, 2880), gpu, partitions) == []
    problems = dict(sp.misfits(sp.Request(1, 5, 9, 60), tiny, partitions))
    assert set(problems) == {"gpus", "cpus", "mem_gb", "time_min"}
    assert "partitions with GPUs: gpu" in problems["gpus"]
    assert "at most 4" in problems["cpus"] and "at most 7.8" in problems["mem_gb"]
    assert "at most 30" in problems["time_min"]
    assert "at most 8 GPUs" in dict(sp.misfits(sp.Request(9, 1, 1, 1), gpu, partitions))["gpus"]
    assert set(dict(sp.misfits(sp.Request(8, 40, 400, 60), cpu, partitions))) == {"gpus"}


def test_no_single_node_with_everything_is_a_misfit():
    partitions = sp.parse_sinfo(
        "mix*|up|infinite|UNLIMITED|64|100000|(null)|1\n"
        "mix*|up|infinite|UNLIMITED|8|400000|gpu:2|1\n"
    )
    (mix,) = partitions.values()
    assert sp.misfits(sp.Request(2, 8, 300, 10), mix, partitions) == []
    problems = sp.misfits(sp.Request(2, 32, 50, 10), mix, partitions)
    assert [name for name, _ in problems] == ["cpus"]
    assert "no single node has 2 GPU, 32 CPUs and 50 GB together" in problems[0][1]


def test_unknown_and_missing_default_partitions():
    partitions = sp.parse_sinfo(SINFO)
    assert sp.choose(partitions, None).name == "cpu"
    with pytest.raises(ValueError, match=r"partition = 'gpus' .* gpu, cpu\*, tiny"):
        sp.choose(partitions, "gpus")
    no_default = sp.parse_sinfo(SINFO.replace("cpu*", "cpu"))
    with pytest.raises(ValueError, match="no default partition"):
        sp.choose(no_default, None)
