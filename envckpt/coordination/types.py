"""Values the coordination layer returns, and the ``GymCoordination`` interface.

``GymCoordination`` has the eight operations of protocol.md section 5. The
adapter calls them in this order for a snapshot::

    participants = await coordination.discover()
    await coordination.retire(participants, cid, dropped, deadline_ts=d)
    result = await coordination.prepare(participants, cid, deadline_ts=d)
    scope = result.continued(episodes)
    replies = await coordination.commit(participants, cid, dir, scope, deadline_ts=d)
    await coordination.resume(participants, cid, deadline_ts=d)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from envckpt.episodes import EnvironmentEpisode, excluding
from envckpt.protocol import STAGES, Kind, Mode, Phase, parse_kind, parse_mode


@dataclass(frozen=True, slots=True)
class Member:
    """One participant server of a deployment, as discovery found it."""

    server_name: str
    kind: Kind
    mode: Mode = Mode.EXPORT_RESTORE
    # Declared ``commit_stop`` in status: the only members sent ``stop``.
    commit_stop: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", parse_kind(self.kind))
        object.__setattr__(self, "mode", parse_mode(self.mode))

    @property
    def stage(self) -> int:
        return STAGES.index(self.kind)


@dataclass(frozen=True, slots=True)
class Participants:
    """The participants of one deployment, ordered by stage then server name."""

    members: tuple[Member, ...]

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.members, key=lambda m: (m.stage, m.server_name)))
        if ordered != self.members:
            object.__setattr__(self, "members", ordered)
        names = [member.server_name for member in self.members]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate participant server names: {names}")

    @property
    def names(self) -> frozenset[str]:
        return frozenset(member.server_name for member in self.members)

    def of_kind(self, *kinds: str) -> tuple[Member, ...]:
        return tuple(member for member in self.members if member.kind in kinds)

    def member(self, server_name: str) -> Member:
        for member in self.members:
            if member.server_name == server_name:
                return member
        raise KeyError(server_name)


# Every instance of a deployment has the same few participants, so discovery
# hands out one frozen value per distinct answer instead of a new one per
# instance: at 100k instances that is 400k objects fewer for the garbage
# collector to walk. The keys are the server names of the deployment's own
# config and parsed kinds and modes, so the caches stay small.
@functools.lru_cache(maxsize=4096)
def interned_member(server_name: str, kind: Kind, mode: Mode, *, commit_stop: bool) -> Member:
    """``Member(...)`` of these fields, the same object each time they repeat."""
    return Member(server_name=server_name, kind=kind, mode=mode, commit_stop=commit_stop)


@functools.lru_cache(maxsize=1024)
def interned_participants(members: tuple[Member, ...]) -> Participants:
    """``Participants(members)``, the same object each time ``members`` repeat."""
    return Participants(members=members)


class ControlReplies(dict[str, dict[str, Any]]):
    """Every participant's reply to one control call (server name -> body), and how long
    each call took: ``seconds`` (server name -> seconds, monotonic clock).

    Made empty and filled as replies arrive (``replies[server] = body``), so
    timing a call costs no copy of its replies.
    """

    __slots__ = ("seconds",)

    def __init__(
        self, seconds: Mapping[str, float], replies: Mapping[str, dict[str, Any]] | None = None
    ) -> None:
        super().__init__(replies or {})
        self.seconds: Mapping[str, float] = seconds


def call_seconds(replies: Mapping[str, Any]) -> Mapping[str, float]:
    """How long each participant's call took, when the coordination measured it (else empty)."""
    return replies.seconds if isinstance(replies, ControlReplies) else {}


@dataclass(frozen=True, slots=True)
class PrepareResult:
    """Whether every stage prepared; each contacted server's reply otherwise.

    ``replies`` maps server name to its ``{phase, report}`` reply. Stages after
    the first unready one were not contacted and have no reply. ``seconds``
    says how long each contacted server's prepare call took.
    """

    prepared: bool
    replies: Mapping[str, Mapping[str, Any]]
    seconds: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "replies", MappingProxyType(dict(self.replies)))
        object.__setattr__(self, "seconds", MappingProxyType(dict(self.seconds)))

    def blockers(self) -> dict[str, tuple[str, ...]]:
        """Capture keys each unprepared server still waits for."""
        return {
            server: tuple((reply.get("report") or {}).get("blockers", ()))
            for server, reply in sorted(self.replies.items())
            if reply.get("phase") != Phase.PREPARED
        }

    def restarts(self) -> frozenset[EnvironmentEpisode]:
        """Episodes some participant cannot capture: one restarting part restarts all."""
        return frozenset(
            EnvironmentEpisode.from_capture_key(key)
            for reply in self.replies.values()
            for key in (reply.get("report") or {}).get("restarts", ())
        )

    def continued(self, episodes: Iterable[EnvironmentEpisode]) -> tuple[EnvironmentEpisode, ...]:
        """The commit scope: ``episodes`` minus the restarts."""
        return excluding(episodes, self.restarts())


class GymCoordination(Protocol):
    """The eight control operations over one Gym deployment (protocol.md 5)."""

    async def discover(self) -> Participants: ...

    async def prepare(
        self, participants: Participants, checkpoint_id: str, *, deadline_ts: float
    ) -> PrepareResult: ...

    async def renew(
        self, participants: Participants, checkpoint_id: str, *, deadline_ts: float
    ) -> None: ...

    async def retire(
        self,
        participants: Participants,
        checkpoint_id: str,
        episodes: Iterable[EnvironmentEpisode],
        *,
        deadline_ts: float,
    ) -> None: ...

    async def forget(
        self,
        participants: Participants,
        checkpoint_id: str,
        rollout_ids: Iterable[str],
        *,
        deadline_ts: float,
    ) -> None: ...

    async def commit(
        self,
        participants: Participants,
        checkpoint_id: str,
        checkpoint_dir: str,
        episodes: Iterable[EnvironmentEpisode] | None,
        *,
        deadline_ts: float,
        stop: bool = False,
    ) -> dict[str, dict[str, Any]]: ...

    async def restore(
        self,
        participants: Participants,
        checkpoint_id: str,
        checkpoint_dir: str,
        episodes: Iterable[EnvironmentEpisode],
        *,
        deadline_ts: float,
    ) -> dict[str, dict[str, Any]]: ...

    async def resume(
        self, participants: Participants, checkpoint_id: str, *, deadline_ts: float
    ) -> None: ...
