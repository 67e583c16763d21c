"""Tests for helpers.shared_servers: make test's xdist work units (one per file, one per
session server), and the list of each session server's users kept complete."""

from __future__ import annotations

import pytest

from helpers.shared_servers import SESSION_SERVERS, unlisted_users, work_unit


def test_every_user_of_a_session_server_in_this_run_is_listed(
    request: pytest.FixtureRequest,
) -> None:
    """An unlisted file would start the server again on the other worker."""
    root = request.config.rootpath
    uses = [
        (item.path.relative_to(root).as_posix(), getattr(item, "fixturenames", ()))
        for item in request.session.items
    ]
    assert unlisted_users(uses) == []


def test_the_files_sharing_a_session_server_are_one_work_unit() -> None:
    users = SESSION_SERVERS["nemo_gym_run"].files
    assert {work_unit(f"{path}::test_a[1]") for path in users} == {"nemo_gym_run"}


def test_other_tests_are_grouped_by_file() -> None:
    assert work_unit("tests/a/test_b.py::TestC::test_d[x::y]") == "tests/a/test_b.py"
    assert work_unit("tests/a/test_b.py::test_e") == "tests/a/test_b.py"


def test_an_unlisted_user_is_named_and_a_namesake_elsewhere_is_not() -> None:
    uses = [
        ("tests/demo/test_other.py", ["tmp_path", "nemo_gym_run"]),
        ("tests/demo/test_nemo_gym.py", ["nemo_gym_run"]),
        ("tests/nemo_gym/test_upstream.py", ["target"]),  # a parameter of the same name
    ]
    assert unlisted_users(uses) == ["tests/demo/test_other.py uses nemo_gym_run"]
