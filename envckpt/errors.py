"""Every error envckpt raises, grouped by what the caller can do about it.

* ``IllegalTransition``: the caller asked for an ordering the machines refuse.
  A bug in the caller; nothing was sent and no state changed.
* ``GymCheckpointUnavailable`` (and ``SnapshotNotReady``): transient. The
  snapshot can be retried; nothing the trainer holds changed.
* ``ProtocolViolation``: a participant or backend broke its contract. Fatal for
  this checkpoint; retrying will not help.
* ``DeadlineExceeded``: the absolute deadline passed before the work finished.
* ``CorruptCheckpoint`` and ``IncompatibleCheckpoint``: a checkpoint on disk
  cannot be used (damaged, partial, foreign) or does not fit this deployment.
  Nothing was installed. ``ManifestTooLarge`` is the ``CorruptCheckpoint`` of
  a manifest beyond its cap (bytes or entries).
* ``UnsupportedDeployment``: the deployment cannot recover as configured.
* ``CoordinationError``: one control operation failed on some participants;
  ``failures`` maps server name to text.
* ``ParticipantError``: a participant refused a call with a protocol error
  code (the server-side error, also what a client turns an error reply back
  into: ``error_from_reply``).

Every class survives ``pickle`` with all its fields, because Ray turns an
unpicklable exception into an untyped ``UnserializableException``.

The trainer's own errors (a refused start, snapshots that keep failing, a
failed restore) and the exit codes they map to are in
``envckpt.trainer.job_errors``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from envckpt.protocol import ERROR_STATUS, ErrorCode, error_envelope


def _rebuild(cls: type[EnvckptError], fields: dict[str, Any]) -> EnvckptError:
    return cls(**fields)


class EnvckptError(Exception):
    """Base class. Subclasses list their keyword fields in ``_fields``."""

    _fields: ClassVar[tuple[str, ...]] = ("message",)

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {name: getattr(self, name) for name in self._fields}
        return (_rebuild, (type(self), fields))

    def __str__(self) -> str:
        return self.message


class IllegalTransition(EnvckptError, RuntimeError):
    """A trigger the machine's table does not allow from the current state."""

    _fields: ClassVar[tuple[str, ...]] = ("machine", "instance", "state", "trigger")

    def __init__(self, *, machine: str, instance: str, state: str, trigger: str) -> None:
        super().__init__(f"{machine} {instance!r}: {trigger!r} is not allowed in state {state!r}")
        self.machine = machine
        self.instance = instance
        self.state = state
        self.trigger = trigger


class GymCheckpointUnavailable(EnvckptError, RuntimeError):
    """A checkpoint control call could not complete; a later snapshot may succeed.

    ``failures`` maps a participant (or instance) to the text it failed with;
    ``codes`` maps those that refused with a protocol error code to the code.
    """

    _fields: ClassVar[tuple[str, ...]] = ("message", "operation", "failures", "codes")

    def __init__(
        self,
        message: str,
        *,
        operation: str = "",
        failures: Mapping[str, str] | None = None,
        codes: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.failures: dict[str, str] = dict(failures or {})
        self.codes: dict[str, str] = dict(codes or {})

    def all_refused_with(self, code: str) -> bool:
        """Whether every failure is a refusal with the protocol error ``code``."""
        return _all_refused_with(self.failures, self.codes, code)


class SnapshotNotReady(GymCheckpointUnavailable):
    """Some instance had rollouts that did not reach a turn boundary in time.

    ``blockers`` maps ``instance_id`` to ``{server: capture keys}``. Every
    instance was resumed before this was raised.
    """

    _fields: ClassVar[tuple[str, ...]] = ("message", "operation", "failures", "codes", "blockers")

    def __init__(
        self,
        message: str,
        *,
        operation: str = "prepare",
        failures: Mapping[str, str] | None = None,
        codes: Mapping[str, str] | None = None,
        blockers: Mapping[str, Mapping[str, tuple[str, ...]]] | None = None,
    ) -> None:
        super().__init__(message, operation=operation, failures=failures, codes=codes)
        self.blockers: dict[str, dict[str, tuple[str, ...]]] = {
            instance: {server: tuple(keys) for server, keys in servers.items()}
            for instance, servers in (blockers or {}).items()
        }


class ProtocolViolation(EnvckptError, RuntimeError):
    """A participant's reply broke the protocol contract; do not retry blindly."""


class DeadlineExceeded(EnvckptError, TimeoutError):
    """The absolute deadline passed before the operation finished."""

    _fields: ClassVar[tuple[str, ...]] = ("message", "deadline_ts")

    def __init__(self, message: str, *, deadline_ts: float) -> None:
        super().__init__(message)
        self.deadline_ts = deadline_ts


class CorruptCheckpoint(EnvckptError, ValueError):
    """Checkpoint state on disk is missing, damaged, partial or foreign."""

    _fields: ClassVar[tuple[str, ...]] = ("message", "path")

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(f"{message} ({path})" if path else message)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return f"{self.message} ({self.path})" if self.path else self.message


class ManifestTooLarge(CorruptCheckpoint):
    """A manifest over its cap: ``found`` (bytes or entries, ``unit``) beyond ``limit``.

    Refused before the whole file is read (bytes) or before its entries are
    used (entries), so a hostile manifest costs neither minutes nor memory.
    """

    _fields: ClassVar[tuple[str, ...]] = ("message", "path", "limit", "found", "unit")

    def __init__(
        self, message: str, *, path: str = "", limit: int = 0, found: int = 0, unit: str = "bytes"
    ) -> None:
        super().__init__(message, path=path)
        self.limit = limit
        self.found = found
        self.unit = unit


class IncompatibleCheckpoint(EnvckptError, RuntimeError):
    """A valid checkpoint that this deployment cannot restore (topology, participants)."""


class UnsupportedDeployment(EnvckptError, RuntimeError):
    """The deployment cannot provide turn-level recovery as configured."""


class CoordinationError(EnvckptError, RuntimeError):
    """One control operation failed on some participants of one deployment.

    ``failures`` maps each failing server to what happened, as text;
    ``codes`` maps the servers that refused with a protocol error code (the
    reply carried the error envelope) to that code, so callers decide on
    codes, never on text.
    """

    _fields: ClassVar[tuple[str, ...]] = ("operation", "failures", "codes")

    def __init__(
        self,
        operation: str,
        failures: Mapping[str, str],
        codes: Mapping[str, str] | None = None,
    ) -> None:
        self.operation = operation
        self.failures: dict[str, str] = dict(sorted(failures.items()))
        self.codes: dict[str, str] = {
            server: str(code) for server, code in sorted((codes or {}).items())
        }
        unknown = set(self.codes) - set(self.failures)
        if unknown:
            raise ValueError(f"codes for servers that did not fail: {sorted(unknown)}")
        detail = "; ".join(f"{server}: {text}" for server, text in self.failures.items())
        super().__init__(f"checkpoint {operation} failed: {detail}")

    def all_refused_with(self, code: str) -> bool:
        """Whether every failing server refused with the protocol error ``code``."""
        return _all_refused_with(self.failures, self.codes, code)


def _all_refused_with(failures: Mapping[str, str], codes: Mapping[str, str], code: str) -> bool:
    return bool(failures) and all(codes.get(server) == code for server in failures)


class ParticipantError(EnvckptError):
    """A participant refused a control or episode call with a protocol error code."""

    _fields: ClassVar[tuple[str, ...]] = ("code", "detail")

    def __init__(self, code: str, detail: str) -> None:
        if code not in ERROR_STATUS:
            raise ValueError(f"unknown protocol error code {code!r}")
        super().__init__(f"{code}: {detail}")
        self.code = ErrorCode(code)
        self.detail = detail

    @property
    def status(self) -> int:
        """The HTTP status this code is answered with."""
        return ERROR_STATUS[self.code]

    def to_wire(self) -> dict[str, Any]:
        """The protocol's error envelope."""
        return error_envelope(self.code, self.detail)


# protocol.md: an error reply without the envelope is reported with this much of its body.
REPLY_EXCERPT_BYTES = 200


def error_from_reply(status: int, text: str) -> ParticipantError:
    """The ``ParticipantError`` an error reply stands for (protocol.md sections 3 and 7).

    The envelope's code and detail when the reply is the protocol's envelope
    with a known code; otherwise ``checkpoint_error`` with ``HTTP <status>``
    and the first 200 bytes of the reply (a body nested too deeply to decode
    included).
    """
    try:
        error = json.loads(text)["error"]
        code, detail = error["code"], error["detail"]
    except (ValueError, TypeError, KeyError, RecursionError):
        pass
    else:
        if isinstance(code, str) and code in ERROR_STATUS and isinstance(detail, str):
            return ParticipantError(code, detail)
    excerpt = text.encode("utf-8", "replace")[:REPLY_EXCERPT_BYTES].decode("utf-8", "replace")
    return ParticipantError("checkpoint_error", f"HTTP {status} {excerpt}")


ALL_ERRORS: tuple[type[EnvckptError], ...] = (
    EnvckptError,
    IllegalTransition,
    GymCheckpointUnavailable,
    SnapshotNotReady,
    ProtocolViolation,
    DeadlineExceeded,
    CorruptCheckpoint,
    ManifestTooLarge,
    IncompatibleCheckpoint,
    UnsupportedDeployment,
    CoordinationError,
    ParticipantError,
)
