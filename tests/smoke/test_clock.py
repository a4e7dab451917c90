"""The smoke check's clock: a job's phases (start-up, steps, evaluations, end) apart, from the
times its wrapped train.py marked."""

import pytest

from dmg_domainbed.smoke.clock import BREAKDOWN, breakdown, phases


def test_steps_leave_out_the_evaluations_between_them():
    # Started at 100.0; four steps marked at 110, 111, 115 and 115.5. After step 0 a checkpoint
    # evaluates two splits (111.0 is not reached: 110.2-110.6 and 110.6-110.7); after step 3,
    # the last, two more (115.7-115.9, 115.9-116.0). The process exits at 117.0.
    marks = {
        "steps": [110.0, 111.0, 115.0, 115.5],
        "evaluations": [
            [110.2, 110.6, 40],
            [110.6, 110.7, 10],
            [115.7, 115.9, 40],
            [115.9, 116.0, 10],
        ],
    }
    timed = phases(100.0, 117.0, marks)

    assert timed.start == pytest.approx(10.0)  # process start to step 0
    # step 0: 110.0 to 111.0 less 0.5 s of evaluation; then 4.0 and 0.5; the last step ends
    # where the last checkpoint's evaluation begins: 115.7 - 115.5
    assert timed.steps == pytest.approx((0.5, 4.0, 0.5, 0.2))
    assert timed.evaluations == pytest.approx((0.5, 0.3))  # one per checkpoint
    assert timed.images == (50, 50)
    assert timed.end == pytest.approx(1.0)  # last evaluation's end to exit
    assert timed.eval_seconds_per_image() == pytest.approx(0.3 / 50)
    # the median after a warm-up of one step: of 4.0, 0.5, 0.2
    assert timed.step_median(1) == pytest.approx(0.5)
    assert timed.step_median(10) == pytest.approx(0.5)  # none left: every step's


def test_a_job_that_ended_before_its_first_step_says_so():
    with pytest.raises(ValueError, match="before its first step"):
        phases(0.0, 1.0, {"steps": [], "evaluations": []})


def test_a_jobs_wall_time_breaks_into_its_start_steps_evaluations_and_end():
    # Started by its launcher at 100.0; the clock's module ran at 101.0, train.py asked for
    # its hparams at 104.0 (its imports done) and for its algorithm's class at 106.0 (the data
    # made); then the steps and checkpoints of the test above; the process ended at 117.0.
    marks = {
        "clock": 101.0,
        "hparams": 104.0,
        "network": 106.0,
        "steps": [110.0, 111.0, 115.0, 115.5],
        "evaluations": [[110.2, 110.6, 40], [110.6, 110.7, 10], [115.7, 115.9, 40]],
    }
    found = breakdown(100.0, 117.0, marks)

    assert list(found) == list(BREAKDOWN)
    expected = {
        "launch": 1.0,
        "imports": 3.0,
        "data": 2.0,
        "network": 4.0,  # the algorithm built, step 0's batch awaited
        "first_step": 0.5,  # 110.0 to 111.0 less its checkpoint's 0.5 s
        "steps": 4.0 + 0.5 + 0.2,
        "evaluation": 0.5 + 0.2,
        "end": 117.0 - 115.9,
    }
    assert found == pytest.approx(expected)
    assert sum(found.values()) == pytest.approx(17.0)  # the whole wall time, nothing twice
