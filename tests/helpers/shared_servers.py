"""Which test files share a session's real servers, so xdist runs each group on one worker.

``make test`` runs ``-n 3 --dist loadfile``: a file's tests stay on one worker, so
a module-scoped server starts once. A session-scoped server (a demo run, a
deployment) used by several files would still start once per worker that gets
one of them; ``SharedServerScheduling`` sends those files to the same worker.
``tests/test_shared_servers.py`` fails when a file uses one without being listed.

Not ``--dist loadgroup`` with ``xdist_group`` marks: xdist 3.8 passes a mark's
group by rewriting the item's node id, which pytest 9.2 no longer reads
(pytest-dev/pytest-xdist#1386), so the marks are silently ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from xdist.scheduler import LoadFileScheduling


@dataclass(frozen=True)
class SessionServer:
    """A session-scoped fixture that starts real processes, and the files using it."""

    # The directory of the conftest defining it: a fixture of the same name
    # elsewhere is another fixture.
    seen_under: str
    files: tuple[str, ...]


SESSION_SERVERS = {
    "nemo_gym_run": SessionServer(
        "tests/demo/", ("tests/demo/test_nemo_gym.py", "tests/demo/test_nemo_gym_verdict.py")
    ),
    "scraped_demo": SessionServer(
        "tests/", ("tests/demo/test_telemetry_hooks.py", "tests/report/test_cli.py")
    ),
    "shared_deployment": SessionServer(
        "tests/nemo_gym/",
        ("tests/nemo_gym/test_gymnasium_agent.py", "tests/nemo_gym/test_simple_agent.py"),
    ),
    "participants": SessionServer("tests/conformance/", ("tests/conformance/test_sequences.py",)),
    "target": SessionServer("tests/security/", ("tests/security/test_hostile_inputs.py",)),
}
_UNIT_OF_FILE = {path: name for name, server in SESSION_SERVERS.items() for path in server.files}


def work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: its session server's name, or else its file."""
    path = nodeid.split("::", 1)[0]
    return _UNIT_OF_FILE.get(path, path)


def unlisted_users(uses: Iterable[tuple[str, Iterable[str]]]) -> list[str]:
    """Of ``(file, fixture names)`` pairs, the files using a session server without being
    listed beside it (each would start that server again on another worker)."""
    return sorted(
        {
            f"{path} uses {name}"
            for path, names in uses
            for name in names
            if name in SESSION_SERVERS
            and path.startswith(SESSION_SERVERS[name].seen_under)
            and path not in SESSION_SERVERS[name].files
        }
    )


class SharedServerScheduling(LoadFileScheduling):
    """``--dist loadfile``, with the files sharing a session server as one work unit."""

    def _split_scope(self, nodeid: str) -> str:
        # The method xdist's own schedulers override to choose a test's work unit.
        return work_unit(nodeid)
