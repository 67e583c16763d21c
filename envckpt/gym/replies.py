"""Checks of participant replies against the request and each other (protocol.md 5).

Pure functions: they raise ``ProtocolViolation`` when a backend broke its
contract, and build the picklable summaries otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import repeat
from typing import Any

from envckpt.coordination.types import Participants, call_seconds
from envckpt.episodes import EnvironmentEpisode, episodes_from_keys
from envckpt.errors import ProtocolViolation
from envckpt.gym.summaries import GymCheckpointCommitSummary


def _keys(reply: Mapping[str, Any], field: str, server: str) -> set[str]:
    value = reply.get(field)
    # map(isinstance, ...) checks each key in C: a commit lists every episode.
    if not isinstance(value, list) or not all(map(isinstance, value, repeat(str))):
        raise ProtocolViolation(f"participant {server!r} replied without a list of {field}")
    return set(value)


def require_reply_set(
    operation: str, participants: Participants, replies: Mapping[str, object]
) -> None:
    expected = participants.names
    if set(replies) != expected:
        raise ProtocolViolation(
            f"{operation} returned an unexpected participant set: "
            f"expected={sorted(expected)!r}, actual={sorted(replies)!r}"
        )


def commit_summary(
    participants: Participants,
    scope: Iterable[EnvironmentEpisode],
    replies: Mapping[str, Mapping[str, Any]],
) -> GymCheckpointCommitSummary:
    """Attribute the committed episodes and staging keys; refuse contradictions."""
    require_reply_set("commit", participants, replies)
    requested = {episode.capture_key for episode in scope}
    if requested and not any(member.kind == "agent" for member in participants.members):
        # Only an agent restores a rollout's place in its /run: a snapshot of
        # these could never be restored, so it is refused now, not after install.
        raise ProtocolViolation(
            f"no agent takes part in checkpoints here, so the {len(requested)} episode(s) in "
            f"scope could not be restored from this snapshot: {sorted(requested)[:10]!r}"
        )
    run_keys: set[str] = set()
    agent_session_keys: set[str] = set()
    staging_keys: set[str] = set()
    keys_by_capture_key: dict[str, set[str]] = {}
    for member in participants.members:
        reply = replies[member.server_name]
        exported = _keys(reply, "episode_ids", member.server_name)
        unexpected = exported - requested
        if unexpected:
            raise ProtocolViolation(
                f"participant {member.server_name!r} exported episodes outside the scope: "
                f"{sorted(unexpected)[:10]!r}"
            )
        if member.kind == "agent" and exported:
            agent_session_keys |= exported
            own = _keys(reply, "run_episode_ids", member.server_name)
            if own - exported:
                raise ProtocolViolation(
                    f"agent {member.server_name!r} names /run episodes it did not export: "
                    f"{sorted(own - exported)[:10]!r}"
                )
            twice = run_keys & own
            if twice:
                raise ProtocolViolation(
                    "episodes exported as their own /run episode by two agents: "
                    f"{sorted(twice)[:10]!r}"
                )
            run_keys |= own
        if member.kind == "model":
            staging_keys |= _keys(reply, "staging_keys", member.server_name)
            by_episode = reply.get("staging_keys_by_episode")
            if not isinstance(by_episode, Mapping):
                raise ProtocolViolation(
                    f"model {member.server_name!r} replied without staging_keys_by_episode"
                )
            for capture_key, keys in by_episode.items():
                if not isinstance(keys, list):
                    raise ProtocolViolation(f"staging keys of {capture_key!r} are not a list")
                keys_by_capture_key.setdefault(capture_key, set()).update(keys)
    try:
        return GymCheckpointCommitSummary(
            # An agent owns only its own /run episodes; environment servers,
            # the other kind of owner, are refused at discovery.
            exported_episodes=episodes_from_keys(run_keys),
            staging_keys=tuple(sorted(staging_keys)),
            participants=tuple(sorted(participants.names)),
            participant_seconds=dict(call_seconds(replies)),
            participant_records=_records_written(replies),
            staging_keys_by_episode={
                EnvironmentEpisode.from_capture_key(key): tuple(sorted(keys))
                for key, keys in keys_by_capture_key.items()
            },
            unowned_live_episodes=episodes_from_keys(agent_session_keys - run_keys),
        )
    except ValueError as error:
        raise ProtocolViolation(f"commit replies are inconsistent: {error}") from error


def _records_written(replies: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Records each participant's commit wrote, from its reply's manifest (when it has one)."""
    written: dict[str, int] = {}
    for server, reply in replies.items():
        manifest = reply.get("manifest")
        count = manifest.get("record_count") if isinstance(manifest, Mapping) else None
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            written[server] = count
    return written


def check_restore_replies(
    participants: Participants,
    scope: Iterable[EnvironmentEpisode],
    replies: Mapping[str, Any],
    *,
    source_checkpoint_id: str,
) -> None:
    """Every participant restored from the expected source; every episode continues."""
    require_reply_set("restore", participants, replies)
    wrong: dict[str, object] = {}
    restored_by_agents: set[str] = set()
    for server, reply in replies.items():
        if not isinstance(reply, Mapping):
            wrong[server] = type(reply).__name__
            continue
        if reply.get("source_checkpoint_id") != source_checkpoint_id:
            wrong[server] = reply.get("source_checkpoint_id")
        if participants.member(server).kind == "agent":
            restored_by_agents |= _keys(reply, "restored", server)
    if wrong:
        raise ProtocolViolation(
            "restore loaded participant state from the wrong checkpoint: "
            f"expected={source_checkpoint_id!r}, actual={wrong!r}"
        )
    missing = sorted({e.next_attempt().capture_key for e in scope} - restored_by_agents)
    if missing:
        raise ProtocolViolation(f"no agent restored these episodes: {missing[:10]!r}")
