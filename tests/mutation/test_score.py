"""The mutation score report: counts per module, and the threshold seen failing."""

from __future__ import annotations

from mutation.score import report, scores

RESULTS = """\
    envckpt.gym.adapter.xǁGymCheckpointAdapterǁrenew__mutmut_1: killed
    envckpt.gym.adapter.xǁGymCheckpointAdapterǁrenew__mutmut_2: killed
    envckpt.gym.adapter.xǁGymCheckpointAdapterǁrenew__mutmut_3: survived
    envckpt.machines.binding.x_bind__mutmut_1: killed
    envckpt.machines.binding.x_bind__mutmut_2: no tests
    envckpt.participant.core.xǁParticipantCoreǁprepare__mutmut_9: timeout
    envckpt.participant.core.xǁParticipantCoreǁprepare__mutmut_8: killed
    a line that is no mutant: killed
"""


def test_statuses_are_counted_per_module() -> None:
    """Each mutant counts under its module; other lines are ignored."""
    by_module = scores(RESULTS.splitlines())
    assert sorted(by_module) == [
        "envckpt.gym.adapter",
        "envckpt.machines.binding",
        "envckpt.participant.core",
    ]
    assert by_module["envckpt.gym.adapter"] == {"killed": 2, "survived": 1}
    assert by_module["envckpt.participant.core"] == {"killed": 1, "timeout": 1}


def test_the_report_lists_each_module_then_the_total() -> None:
    """A timeout is listed apart and not counted; no threshold means status 0."""
    text, status = report(scores(RESULTS.splitlines()), None)
    assert text.splitlines() == [
        "envckpt.gym.adapter: 2/3 killed (66.7%), 1 survived, 0 no tests",
        "envckpt.machines.binding: 1/2 killed (50.0%), 0 survived, 1 no tests",
        "envckpt.participant.core: 1/1 killed (100.0%), 0 survived, 0 no tests, "
        "1 not judged (timeout, suspicious, not checked)",
        "mutation score: 4/6 killed (66.7%), 1 survived, 1 no tests, "
        "1 not judged (timeout, suspicious, not checked)",
    ]
    assert status == 0


def test_a_module_below_the_threshold_fails_the_run() -> None:
    """--fail-under names each module below it (and the total); at or above, status 0."""
    text, status = report(scores(RESULTS.splitlines()), 60.0)
    assert status == 1
    assert text.splitlines()[-1] == "below 60%: envckpt.machines.binding"
    passing = [line for line in RESULTS.splitlines() if "binding" not in line]
    assert report(scores(passing), 60.0)[1] == 0
    text, status = report({}, 90.0)
    assert status == 1 and text.splitlines()[-1] == "below 90%: the total"
