"""Tests for envckpt.participant.confinement: which directories and deadlines a request may name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envckpt.errors import ParticipantError
from envckpt.participant.confinement import (
    MAX_COMPONENT_BYTES,
    MAX_DIR_BYTES,
    RequestBounds,
    check_dir_shape,
)

KIND, INSTANCE = "model", "policy"


def refusal(bounds: RequestBounds, value: str) -> str:
    with pytest.raises(ParticipantError) as caught:
        bounds.check_checkpoint_dir(value, kind=KIND, instance=INSTANCE)
    assert caught.value.code == "invalid_request" and caught.value.status == 422
    return caught.value.detail


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "root"
    path.mkdir()
    return path


def test_directories_under_the_root_are_accepted(root: Path) -> None:
    """The root itself, a child, and a not yet existing grandchild are all fine."""
    bounds = RequestBounds.under(root)
    for value in (root, root / "s-1", root / "a" / "b" / "c"):
        bounds.check_checkpoint_dir(str(value), kind=KIND, instance=INSTANCE)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("relative/dir", "absolute"),
        ("", "absolute"),
        ("/a/../b", "normalized"),
        ("/a/./b", "normalized"),
        ("/a//b", "normalized"),
        ("//a", "normalized"),
        ("/a/b/", "normalized"),
        ("/a\x00b", "U+0000"),
        ("/a\nb", "U+000A"),
        ("/a\x1b[31mb", "U+001B"),
        ("/a\x7fb", "U+007F"),
        ("/a\tb", "U+0009"),
        ("/a\u202eb", "U+202E"),
        ("/a\ud800b", "U+D800"),
        ("/a\u2028b", "U+2028"),
        ("/" + "x" * (MAX_COMPONENT_BYTES + 1), "component"),
        ("/" + "/".join(["y" * 200] * 21), "bytes, over"),
    ],
)
def test_malformed_directories_are_refused_by_shape(value: str, says: str) -> None:
    """Relative, unnormalized, control characters and over-long: refused whatever the root."""
    assert says in refusal(RequestBounds.unconfined(), value)


def test_printable_paths_pass_the_shape_check_ascii_or_not() -> None:
    """Plain ASCII (the fast path) and printable non-ASCII names are both accepted."""
    for value in ("/data/run-1/ckpt_0.a", "/données/运行/ckpt", "/a b/c~d"):
        check_dir_shape(value)


def test_the_length_bounds_are_in_utf8_bytes() -> None:
    """Exactly at the limits is fine; one multi-byte character past them is not."""
    check_dir_shape("/" + "x" * MAX_COMPONENT_BYTES)
    with pytest.raises(ParticipantError):
        check_dir_shape("/" + "x" * (MAX_COMPONENT_BYTES - 1) + "é")
    whole = "/" + "/".join(["z" * 200] * 17)
    whole += "/" + "z" * (MAX_DIR_BYTES - len(whole) - 1)
    assert len(whole.encode()) == MAX_DIR_BYTES
    check_dir_shape(whole)


def test_directories_outside_the_root_are_refused(root: Path, tmp_path: Path) -> None:
    """The filesystem root, a sibling, and a prefix-sharing sibling are all outside."""
    bounds = RequestBounds.under(root)
    for value in ("/", str(tmp_path), str(tmp_path / "root-other"), "/etc", "/tmp"):
        assert "outside" in refusal(bounds, value)


def test_a_symlink_out_of_the_root_is_refused(root: Path, tmp_path: Path) -> None:
    """A link under the root pointing elsewhere is followed and refused; one inside is fine."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    (root / "inside").symlink_to(root / "real")
    bounds = RequestBounds.under(root)
    assert "outside" in refusal(bounds, str(root / "escape"))
    assert "outside" in refusal(bounds, str(root / "escape" / "deeper"))
    bounds.check_checkpoint_dir(str(root / "inside"), kind=KIND, instance=INSTANCE)


def test_a_symlink_planted_below_the_directory_is_refused(root: Path, tmp_path: Path) -> None:
    """<dir>/gym linking out would lead the write out: the participant directory is checked too."""
    outside = tmp_path / "outside"
    outside.mkdir()
    checkpoint = root / "s-1"
    checkpoint.mkdir()
    (checkpoint / "gym").symlink_to(outside)
    assert "outside" in refusal(RequestBounds.under(root), str(checkpoint))


def test_a_root_that_is_itself_a_symlink_is_resolved(root: Path, tmp_path: Path) -> None:
    """Configured through a link, the root still admits its own directories."""
    link = tmp_path / "root-link"
    link.symlink_to(root)
    bounds = RequestBounds.under(link)
    bounds.check_checkpoint_dir(str(link / "s-1"), kind=KIND, instance=INSTANCE)
    bounds.check_checkpoint_dir(str(root / "s-1"), kind=KIND, instance=INSTANCE)


def test_a_symlink_loop_is_refused_not_raised(root: Path) -> None:
    """A loop under the root is a 422, never an exception escaping the check."""
    (root / "loop").symlink_to(root / "loop")
    with pytest.raises(ParticipantError):
        RequestBounds.under(root).check_checkpoint_dir(
            str(root / "loop" / "x"), kind=KIND, instance=INSTANCE
        )


def test_unconfined_accepts_any_well_formed_directory() -> None:
    """Unconfined bounds still check the shape, but not where the directory is."""
    bounds = RequestBounds.unconfined()
    assert not bounds.confined
    bounds.check_checkpoint_dir("/", kind=KIND, instance=INSTANCE)
    bounds.check_checkpoint_dir("/anywhere/at/all", kind=KIND, instance=INSTANCE)


def test_bounds_are_configured_sanely(tmp_path: Path) -> None:
    """A relative root, a NUL in it, and a non-positive or infinite lease are refused."""
    with pytest.raises(ValueError, match="absolute"):
        RequestBounds.under("relative")
    with pytest.raises(ValueError, match="absolute"):
        RequestBounds.under("/a\x00b")
    for seconds in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="max_lease_seconds"):
            RequestBounds.under(tmp_path, max_lease_seconds=seconds)
    assert RequestBounds.of(None) == RequestBounds.unconfined()
    assert RequestBounds.of(os.fspath(tmp_path)) == RequestBounds.under(tmp_path)


def test_deadlines_beyond_the_longest_lease_are_refused() -> None:
    """At most max_lease_seconds ahead of the participant's own clock; the past is fine here."""
    bounds = RequestBounds.unconfined(max_lease_seconds=100.0)
    now = 1_800_000_000.0
    bounds.check_deadline(now + 100.0, now=now)
    bounds.check_deadline(now - 1e6, now=now)  # the core answers deadline_exceeded for these
    for deadline in (now + 100.5, 1e308, float("inf")):
        with pytest.raises(ParticipantError) as caught:
            bounds.check_deadline(deadline, now=now)
        assert caught.value.code == "invalid_request"


def test_the_bound_moves_with_the_participants_clock() -> None:
    """A fake clock far from real time bounds deadlines relative to itself."""
    bounds = RequestBounds.unconfined()
    far_future = 4_000_000_000.0
    bounds.check_deadline(far_future + 3600.0, now=far_future)
    with pytest.raises(ParticipantError):
        bounds.check_deadline(far_future + 3601.0, now=far_future)


def resolved_answer(root: Path, value: str) -> bool:
    """The reference: both paths resolved in full, compared with the resolved root."""
    real_root = Path(os.path.realpath(root))
    own = Path(value) / "gym" / KIND / INSTANCE
    return all(Path(os.path.realpath(path)).is_relative_to(real_root) for path in (value, str(own)))


def accepted(bounds: RequestBounds, value: str) -> bool:
    try:
        bounds.check_checkpoint_dir(value, kind=KIND, instance=INSTANCE)
    except ParticipantError:
        return False
    return True


def test_the_quick_walk_answers_as_full_resolution_does(root: Path, tmp_path: Path) -> None:
    """Paths with and without links, at every depth, missing or not: same answer as realpath."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "real" / "gym" / KIND).mkdir(parents=True)
    (root / "real" / "gym" / KIND / INSTANCE).symlink_to(outside)
    (root / "ok" / "gym").mkdir(parents=True)
    (root / "ok" / "gym" / KIND).symlink_to(root / "elsewhere")
    (root / "file").write_text("not a directory")
    (root / "alias").symlink_to(root / "ok")
    values = [
        root / "new",
        root / "real",
        root / "ok",
        root / "alias",
        root / "file",
        root / "file" / "below",
        root / "a" / "b",
        tmp_path,
        outside,
    ]
    bounds = RequestBounds.under(root)
    answers = {str(value): accepted(bounds, str(value)) for value in values}
    assert answers == {str(value): resolved_answer(root, str(value)) for value in values}
    # The cases that matter, spelled out: a link at the instance level leads
    # out; one inside the root does not.
    assert not answers[str(root / "real")]
    assert answers[str(root / "ok")]
    assert answers[str(root / "alias")]


def test_a_root_with_a_dotdot_after_a_link_is_resolved_as_the_kernel_does(
    tmp_path: Path,
) -> None:
    """In "<link>/../r" the ".." applies after the link: the root is where it leads, not
    the textual parent."""
    target = tmp_path / "far" / "deep"
    target.mkdir(parents=True)
    (tmp_path / "far" / "r").mkdir()
    (tmp_path / "near").mkdir()
    (tmp_path / "near" / "r").mkdir()
    (tmp_path / "near" / "link").symlink_to(target)
    bounds = RequestBounds.under(f"{tmp_path}/near/link/../r")
    assert accepted(bounds, str(tmp_path / "far" / "r" / "s-1"))
    assert not accepted(bounds, str(tmp_path / "near" / "r" / "s-1"))
