"""Every row of every machine table is exercised by some test (checked after all others)."""

from __future__ import annotations

import pytest

from transition_coverage.plugin import CHECK_MARK, RECORDER, judged
from transition_coverage.rows import coverage_report


@getattr(pytest.mark, CHECK_MARK)
def test_every_table_row_is_exercised(request: pytest.FixtureRequest) -> None:
    """No (source, trigger) row of the four tables goes unexercised by the suite."""
    reason = judged(request.config)
    if reason is not None:
        pytest.skip(reason)
    report = coverage_report(RECORDER.entries())
    missing = [f"{machine}: {source} --{trigger}-->" for machine, source, trigger in report.never]
    assert not missing, "rows no test exercised:\n" + "\n".join(missing)
    assert not report.foreign, f"transitions no table has: {dict(report.foreign)}"
