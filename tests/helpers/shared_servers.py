"""Which test files share a session's real servers, so xdist runs each group on one worker.

``make test`` runs ``-n 2 --dist loadfile``: a file's tests stay on one worker, so
a module-scoped server starts once. A session-scoped server (a demo run, a
deployment) used by several files would still start once per worker that gets
one of them; ``SharedServerScheduling`` sends those files to the same worker.

Not ``--dist loadgroup`` with ``xdist_group`` marks: xdist 3.8 passes a mark's
group by rewriting the item's node id, which pytest 9.2 no longer reads
(pytest-dev/pytest-xdist#1386), so the marks are silently ignored.
"""

from __future__ import annotations

from collections.abc import Iterable

from xdist.scheduler import LoadFileScheduling

# A session-scoped fixture that starts real processes -> every test file using it.
SESSION_SERVERS: dict[str, tuple[str, ...]] = {
    "nemo_gym_run": ("tests/demo/test_nemo_gym.py", "tests/demo/test_nemo_gym_verdict.py"),
    "scraped_demo": ("tests/demo/test_telemetry_hooks.py", "tests/report/test_cli.py"),
    "shared_deployment": (
        "tests/nemo_gym/test_gymnasium_agent.py",
        "tests/nemo_gym/test_simple_agent.py",
    ),
    "participants": ("tests/conformance/test_sequences.py",),
    "target": ("tests/security/test_hostile_inputs.py",),
}
GROUP_OF_FILE = {path: name for name, paths in SESSION_SERVERS.items() for path in paths}


def misplaced_users(uses: Iterable[tuple[str, Iterable[str]]]) -> list[str]:
    """``(file, fixture names)`` pairs whose file uses a session server without being
    listed beside it in ``SESSION_SERVERS`` (it would start that server a second time)."""
    return sorted(
        f"{path} uses {name}"
        for path, names in uses
        for name in names
        if name in SESSION_SERVERS and path not in SESSION_SERVERS[name]
    )


class SharedServerScheduling(LoadFileScheduling):
    """``--dist loadfile``, with the files sharing a session server as one work unit."""

    def _split_scope(self, nodeid: str) -> str:
        # xdist's documented extension point: the work unit a node id belongs to.
        path = super()._split_scope(nodeid)
        return GROUP_OF_FILE.get(path, path)
