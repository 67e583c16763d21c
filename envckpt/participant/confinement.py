"""What a control request may name: checkpoint directories under a root, deadlines in reach.

A participant writes and reads checkpoints only where its host allows
(``checkpoint_root``), and accepts only deadlines it can keep its lease to
(``max_lease_seconds`` ahead of its own clock). The edge checks every
validated request against these bounds before the core sees it, so a refusal
is a ``422 invalid_request`` that touches no file and changes nothing::

    bounds = RequestBounds.under("/data/ckpt")          # or RequestBounds.unconfined()
    bounds.check_checkpoint_dir("/data/ckpt/s-1", kind="model", instance="policy")
    bounds.check_deadline(deadline_ts, now=clock.now())

A checkpoint directory must be an absolute, normalized path (no ``.``,
``..``, doubled or trailing separators), free of control, format and
surrogate characters, at most 3584 UTF-8 bytes (room below PATH_MAX for the
participant's own files) with no component over 255,
and resolve, symlinks included, at or under the root; so must the
participant's own directory below it (``<dir>/gym/<kind>/<instance>``), so a
symlink planted there cannot lead the write out either. The checks resolve
paths when the request arrives: they bound what a caller can *name*; a local
user who can swap directories under the root after the check is outside
what they guard.

The usual request names a directory under the root through no symlink at
all; for it the check is one ``lstat`` per component below the root (about
50 us, off nothing: it runs on the event loop). Only a path with a symlink on
it, or one the walk cannot judge (a component that is not a directory, no
permission), takes the full resolution (``os.path.realpath`` and a loop check,
about 1 ms), so the answer is the same either way.
"""

from __future__ import annotations

import math
import os
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from envckpt.errors import ParticipantError
from envckpt.participant.store.layout import participant_dir
from envckpt.protocol import DEFAULT_MAX_LEASE_SECONDS, ErrorCode

__all__ = [
    "DEFAULT_MAX_LEASE_SECONDS",
    "MAX_COMPONENT_BYTES",
    "MAX_DIR_BYTES",
    "RequestBounds",
    "check_dir_shape",
]

# Below PATH_MAX (4096 with its NUL): room for what the store adds below the
# directory (gym/<kind>/<instance>/records-<sha256>.jsonl and temporary names).
MAX_DIR_BYTES = 3584
MAX_COMPONENT_BYTES = 255
# Unicode categories never accepted in a directory name: control (NUL, newline,
# escape), format (bidi overrides that disguise a path in a log), surrogates
# (not encodable as a file name), line and paragraph separators.
REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _refuse(detail: str) -> ParticipantError:
    return ParticipantError(ErrorCode.INVALID_REQUEST, detail)


def _real(path: str) -> Path:
    """``path`` with every existing symlink resolved (the rest kept as written)."""
    try:
        real = Path(os.path.realpath(path))
        # realpath leaves a link it cannot resolve (a loop) in place instead of
        # raising: a symlink still on the resolved path is one.
        if any(part.is_symlink() for part in (real, *real.parents)):
            raise _refuse("checkpoint_dir cannot be resolved: a symlink loop")
    except (OSError, RuntimeError, ValueError) as error:  # a name too long, an odd byte
        raise _refuse(f"checkpoint_dir cannot be resolved: {error}") from None
    return real


def _symlink_free_below(path: str, base: str) -> bool:
    """True when no existing component of ``path`` below ``base`` is a symlink.

    ``path`` is normalized and starts with ``base`` + "/". False whenever a
    component is a symlink or cannot be judged (not a directory, no
    permission): the caller then resolves the whole path instead.
    """
    prefix = base.rstrip("/")
    for part in path[len(prefix) + 1 :].split("/"):
        prefix = f"{prefix}/{part}"
        try:
            mode = os.lstat(prefix).st_mode
        except FileNotFoundError:
            # Nothing below a missing component exists: nothing left to resolve.
            return True
        except (OSError, ValueError):
            return False
        if stat.S_ISLNK(mode):
            return False
    return True


def _real_root(root: str) -> str:
    """``root`` resolved: itself when no component of it is a symlink (the usual case)."""
    # Only a normalized root is taken as written: in "/a/link/../b" the ".."
    # applies after the link is followed, which the walk does not do.
    if root == "/" or (os.path.normpath(root) == root and _symlink_free_below(root, "/")):
        return root
    return str(_real(root))


def check_dir_shape(value: str) -> None:
    """Absolute, normalized, printable and bounded; raise ``invalid_request`` otherwise."""
    # Printable ASCII (the usual path) holds none of the refused categories:
    # the per-character lookup is for everything else.
    plain = value.isascii() and value.isprintable()
    for character in () if plain else value:
        if unicodedata.category(character) in REFUSED_CATEGORIES:
            raise _refuse(
                f"checkpoint_dir contains U+{ord(character):04X}, a character not allowed in it"
            )
    encoded = value.encode("utf-8")
    if len(encoded) > MAX_DIR_BYTES:
        raise _refuse(f"checkpoint_dir is {len(encoded)} bytes, over {MAX_DIR_BYTES}")
    if not os.path.isabs(value):
        raise _refuse("checkpoint_dir must be an absolute path")
    if os.path.normpath(value) != value or value.startswith("//"):
        raise _refuse("checkpoint_dir must be normalized (no '.', '..', '//' or trailing '/')")
    longest = max((len(part.encode("utf-8")) for part in value.split("/")), default=0)
    if longest > MAX_COMPONENT_BYTES:
        raise _refuse(
            f"checkpoint_dir has a component of {longest} bytes, over {MAX_COMPONENT_BYTES}"
        )


@dataclass(frozen=True, slots=True)
class RequestBounds:
    """One participant's bounds: its checkpoint root (None: unconfined) and longest lease."""

    checkpoint_root: Path | None
    max_lease_seconds: float = DEFAULT_MAX_LEASE_SECONDS

    def __post_init__(self) -> None:
        seconds = self.max_lease_seconds
        if isinstance(seconds, bool) or not math.isfinite(seconds) or seconds <= 0:
            raise ValueError(f"max_lease_seconds must be positive and finite, got {seconds!r}")
        root = self.checkpoint_root
        if root is not None:
            text = str(root)
            if not os.path.isabs(text) or "\x00" in text:
                raise ValueError(f"checkpoint_root must be an absolute path, got {text!r}")

    @classmethod
    def of(
        cls,
        root: str | os.PathLike[str] | None,
        *,
        max_lease_seconds: float = DEFAULT_MAX_LEASE_SECONDS,
    ) -> RequestBounds:
        """``under(root)``, or unconfined for None."""
        return cls(None if root is None else Path(os.fspath(root)), max_lease_seconds)

    @classmethod
    def under(
        cls, root: str | os.PathLike[str], *, max_lease_seconds: float = DEFAULT_MAX_LEASE_SECONDS
    ) -> RequestBounds:
        """Checkpoint directories at or under ``root`` (absolute; it need not exist yet)."""
        return cls(Path(os.fspath(root)), max_lease_seconds)

    @classmethod
    def unconfined(cls, *, max_lease_seconds: float = DEFAULT_MAX_LEASE_SECONDS) -> RequestBounds:
        """Any directory of the right shape: only for a host that trusts every caller."""
        return cls(None, max_lease_seconds)

    @property
    def confined(self) -> bool:
        return self.checkpoint_root is not None

    def check_checkpoint_dir(self, value: str, *, kind: str, instance: str) -> None:
        """Raise ``invalid_request`` unless ``value`` is a directory this participant may use."""
        check_dir_shape(value)
        if self.checkpoint_root is None:
            return
        root = _real_root(str(self.checkpoint_root))
        own = str(participant_dir(value, kind, instance))
        # The fast answer: named under the root's real path, and no symlink
        # from there down to the participant's own directory (which covers
        # ``value`` too: it is a prefix of it), so both resolve to themselves.
        named_under = value == root or value.startswith(root.rstrip("/") + "/")
        if named_under and _symlink_free_below(own, root):
            return
        real_root = Path(root)
        for path in (value, own):
            if not _real(path).is_relative_to(real_root):
                raise _refuse(
                    f"checkpoint_dir {value!r} is outside this participant's checkpoint root"
                )

    def check_deadline(self, deadline_ts: float, *, now: float) -> None:
        """Raise ``invalid_request`` for a deadline further ahead than the longest lease."""
        if not math.isfinite(deadline_ts):
            raise _refuse(f"deadline_ts must be finite, got {deadline_ts!r}")
        if deadline_ts > now + self.max_lease_seconds:
            raise _refuse(
                f"deadline_ts is {deadline_ts - now:.0f} s ahead; at most "
                f"{self.max_lease_seconds:g} s (max_lease_seconds) is accepted"
            )
