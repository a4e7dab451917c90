"""The demo's tiny MLP jobs run on CPU cores, one per core, even where GPUs are visible;
local_parallel's own default keeps image jobs on the GPUs."""

from dmg_domainbed import demo
from dmg_domainbed.cores import usable_cores
from dmg_domainbed.launchers.local_parallel import Plan
from dmg_domainbed.sweep.launcher_settings import launcher_environment


def plan_of(config, environ):
    env, _ = launcher_environment(
        config.path, demo.LAUNCHER, environ, config.launcher, config.launcher_options
    )
    return Plan.from_environment(env)


def test_the_demo_asks_for_its_jobs_on_cpu_cores_with_the_gpus_hidden():
    config = demo.demo_config(["ERM"], steps=10, jobs=None, trials=1, samples=1)
    plan = plan_of(config, {"CUDA_VISIBLE_DEVICES": "0,1"})  # a machine with two GPUs
    assert plan.gpus == () and plan.jobs == usable_cores()
    assert all(plan.job_environment(slot)["CUDA_VISIBLE_DEVICES"] == "" for slot in range(2))
    assert "on CPU (GPUs hidden from the jobs)" in plan.describe()


def test_local_parallel_itself_keeps_jobs_on_the_gpus():
    plan = Plan.from_environment({"CUDA_VISIBLE_DEVICES": "0,1"})
    assert plan.gpus == ("0", "1") and plan.jobs == 2
    assert [plan.job_environment(slot)["CUDA_VISIBLE_DEVICES"] for slot in range(2)] == ["0", "1"]
