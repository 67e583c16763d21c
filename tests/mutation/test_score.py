"""The mutation score report: counts per module, equivalents left out, the threshold failing."""

from __future__ import annotations

import pytest

from mutation.score import EQUIVALENT_FILE, EquivalentListError, load_equivalents, report, scores

RESULTS = """\
    envckpt.gym.adapter.xǁGymCheckpointAdapterǁrenew__mutmut_1: killed
    envckpt.gym.adapter.xǁGymCheckpointAdapterǁrenew__mutmut_2: killed
    envckpt.gym.adapter.xǁGymCheckpointAdapterǁrenew__mutmut_3: survived
    envckpt.machines.binding.x_bind__mutmut_1: killed
    envckpt.machines.binding.x_bind__mutmut_2: no tests
    envckpt.participant.core.xǁParticipantCoreǁprepare__mutmut_9: timeout
    envckpt.participant.core.xǁParticipantCoreǁprepare__mutmut_8: killed
    envckpt.trainer.restorer.x_choose__mutmut_1: not checked
    a line that is no mutant: killed
"""

ADAPTER_RENEW_3 = """\
[[equivalent]]
module = "envckpt.gym.adapter"
mutant = "envckpt.gym.adapter.xǁGymCheckpointAdapterǁrenew__mutmut_3"
reason = "a default no caller leaves unset"
"""


def test_statuses_are_counted_per_module() -> None:
    """Each mutant counts under its module (methods and functions); other lines are ignored."""
    by_module = scores(RESULTS.splitlines())
    assert sorted(by_module) == [
        "envckpt.gym.adapter",
        "envckpt.machines.binding",
        "envckpt.participant.core",
        "envckpt.trainer.restorer",
    ]
    assert sorted(by_module["envckpt.gym.adapter"].values()) == ["killed", "killed", "survived"]
    assert sorted(by_module["envckpt.participant.core"].values()) == ["killed", "timeout"]


def test_the_report_lists_each_module_then_the_total() -> None:
    """A timeout is named apart and not counted; a module that did not run is named, not scored."""
    text, status = report(scores(RESULTS.splitlines()), None)
    assert text.splitlines() == [
        "envckpt.gym.adapter  2/3  66.7%  (equivalent: 0; raw 2/3 66.7%)",
        "envckpt.machines.binding  1/2  50.0%  (equivalent: 0; raw 1/2 50.0%)",
        "envckpt.participant.core  1/1  100.0%  (equivalent: 0; raw 1/1 100.0%)"
        "  1 not judged (timeout, suspicious, not checked)",
        "envckpt.trainer.restorer  not run",
        "total  4/6  66.7%  (equivalent: 0; raw 4/6 66.7%)"
        "  1 not judged (timeout, suspicious, not checked)",
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


def test_listed_equivalents_are_left_out_of_the_score_that_is_judged() -> None:
    """A listed survivor leaves the killed share; the raw share still counts it."""
    by_module = scores(RESULTS.splitlines())
    equivalents = load_equivalents(ADAPTER_RENEW_3)
    text, _ = report(by_module, None, equivalents)
    assert "envckpt.gym.adapter  2/2  100.0%  (equivalent: 1; raw 2/3 66.7%)" in text.splitlines()
    assert report(by_module, 70.0)[1] == 1  # adapter 66.7% raw, total 66.7%
    text, status = report(by_module, 70.0, equivalents)
    assert text.splitlines()[-1] == "below 70%: envckpt.machines.binding"
    assert status == 1


def test_an_entry_that_hides_nothing_is_reported_stale() -> None:
    """A listed mutant that was killed, or that the results do not name, is stale."""
    killed = ADAPTER_RENEW_3.replace("renew__mutmut_3", "renew__mutmut_1")
    renumbered = ADAPTER_RENEW_3.replace("renew__mutmut_3", "renew__mutmut_99")
    by_module = scores(RESULTS.splitlines())
    assert (
        "stale equivalent entry: "
        + ("envckpt.gym.adapter.xǁGymCheckpointAdapterǁrenew__mutmut_1 (killed)")
        in report(by_module, None, load_equivalents(killed))[0].splitlines()
    )
    assert (
        "stale equivalent entry: "
        + ("envckpt.gym.adapter.xǁGymCheckpointAdapterǁrenew__mutmut_99 (not in the results)")
        in report(by_module, None, load_equivalents(renumbered))[0].splitlines()
    )


@pytest.mark.parametrize(
    "entry",
    [
        'module = "envckpt.gym.adapter"\nmutant = "envckpt.gym.adapter.x_f__mutmut_1"\n',
        'module = "envckpt.gym.replies"\nmutant = "envckpt.gym.adapter.x_f__mutmut_1"\n'
        'reason = "r"\n',
    ],
)
def test_a_malformed_entry_is_a_typed_error(entry: str) -> None:
    """An entry without a reason, or naming another module's mutant, is refused."""
    with pytest.raises(EquivalentListError):
        load_equivalents("[[equivalent]]\n" + entry)


def test_the_project_list_loads() -> None:
    """equivalent.toml itself parses, and every entry gives a reason."""
    assert all(e.reason for e in load_equivalents(EQUIVALENT_FILE.read_text(encoding="utf-8")))
