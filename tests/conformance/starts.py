"""The named starting points of the conformance rows, and the context a row runs in.

Every row starts from one of ``STARTS``: a phase, perhaps with state held or a
turn in flight, reached with real control calls (and the simulated Gym's data
routes where state or traffic is needed) under ids unique to the row. ``Ctx``
keeps what the start produced (the open id, a finished id, recorded replies,
directories, the row's episodes) for the row's placeholders, and cleans up
after the row: it resumes whatever is open and retires the row's rollouts::

    with contextlib.closing(Ctx(participant, tmp_path, "prepared")) as ctx:
        STARTS["prepared"].reach(ctx)
        ctx.open_id, ctx.recorded["prepare"]
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envckpt.episodes import EnvironmentEpisode

from conformance.target import Participant, Reply


class StartFailed(AssertionError):
    """The participant did not reach a row's starting point (a failure of the row)."""


@dataclass
class Ctx:
    """What one row's start produced, and the cleanup the row owes."""

    participant: Participant
    tmp: Path
    start: str
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    open_id: str | None = None
    finished_id: str | None = None
    oldest_finished: str | None = None
    published_id: str | None = None
    recorded: dict[str, Any] = field(default_factory=dict)
    rollouts: set[str] = field(default_factory=set)
    minted: int = 0
    # False on the slow deployment: cleanup does not wait for turns to end there.
    settle: bool = True

    def __post_init__(self) -> None:
        self.ep = EnvironmentEpisode(f"r_{self.tag}", 0)
        self.ep2 = EnvironmentEpisode(f"s_{self.tag}", 0)
        self.published_dir = self.tmp / f"published-{self.tag}"
        self.commit_dir = self.tmp / f"committed-{self.tag}"

    def new_id(self, what: str = "c") -> str:
        self.minted += 1
        return f"{what}-{self.tag}-{self.minted}"

    # ------------------------------------------------------------------ calls

    def post(self, route: str, **fields: Any) -> Reply:
        return self.participant.client.post(route, **fields)

    def ok(self, route: str, **fields: Any) -> dict[str, Any]:
        """A call the start needs to succeed."""
        reply = self.post(route, **fields)
        if reply.status != 200 or not isinstance(reply.body, dict):
            raise StartFailed(f"{self.start}: {route} {fields} -> {reply.describe()}")
        return reply.body

    def hold(self, episode: EnvironmentEpisode) -> None:
        assert self.participant.driver is not None
        self.rollouts.add(episode.rollout_id)
        self.participant.driver.hold(self.participant.kind, episode)

    def start_turn(self, episode: EnvironmentEpisode) -> None:
        assert self.participant.driver is not None
        self.rollouts.add(episode.rollout_id)
        self.participant.driver.start(self.participant.kind, episode)

    # ---------------------------------------------------------------- cleanup

    def close(self) -> None:
        """Resume whatever is open and retire the row's rollouts."""
        open_id = self.participant.client.status().get("checkpoint_id")
        if open_id is not None:
            self.post("resume", checkpoint_id=open_id)
        driver = self.participant.driver
        if driver is not None:
            # On the slow deployment a retired turn may still be finishing:
            # keep its mark (it then records nothing) instead of waiting.
            driver.clean(self.rollouts, wait=self.settle)


# ---------------------------------------------------------------- the starts


def idle(ctx: Ctx) -> None:
    """Idle, with one id finished here (a resume of an id never seen fences it)."""
    ctx.finished_id = ctx.new_id("fin")
    ctx.ok("resume", checkpoint_id=ctx.finished_id)


def held(ctx: Ctx) -> None:
    idle(ctx)
    ctx.hold(ctx.ep)


def retired(ctx: Ctx) -> None:
    """``ep`` held, then retired here: its attempt is refused from now on."""
    held(ctx)
    ctx.ok("retire", checkpoint_id=ctx.new_id("ret"), episode_ids=[ctx.ep.to_wire()])


def publish(ctx: Ctx) -> None:
    """prepare, commit everything held to ``published_dir``, resume (the id is then finished)."""
    cid = ctx.new_id("pub")
    reply = ctx.ok("prepare", checkpoint_id=cid)
    if reply.get("phase") != "prepared":
        raise StartFailed(f"publish: prepare did not get ready: {reply}")
    ctx.ok("commit", checkpoint_id=cid, checkpoint_dir=str(ctx.published_dir), episode_ids=None)
    ctx.ok("resume", checkpoint_id=cid)
    ctx.published_id = ctx.finished_id = cid


def published(ctx: Ctx) -> None:
    idle(ctx)
    publish(ctx)


def published_held(ctx: Ctx) -> None:
    """A published checkpoint of ``ep`` while this process still holds ``ep`` itself."""
    held(ctx)
    publish(ctx)


def restored_before(ctx: Ctx) -> None:
    """The failed all-or-nothing restore path: this process restored ``ep`` under one id,
    the next attempt was retired there and resumed; ``ep2`` was committed too."""
    idle(ctx)
    ctx.hold(ctx.ep)
    ctx.hold(ctx.ep2)
    publish(ctx)
    assert ctx.published_id is not None
    attempts = [ctx.ep.to_wire(), ctx.ep2.to_wire()]
    ctx.ok("retire", checkpoint_id=ctx.published_id, episode_ids=attempts)
    rid = ctx.new_id("rst")
    ctx.ok(
        "restore",
        checkpoint_id=rid,
        checkpoint_dir=str(ctx.published_dir),
        episode_ids=[ctx.ep.to_wire()],
    )
    ctx.ok("retire", checkpoint_id=rid, episode_ids=[ctx.ep.next_attempt().to_wire()])
    ctx.ok("resume", checkpoint_id=rid)
    ctx.finished_id = rid


def last_of_many_finished(ctx: Ctx) -> None:
    """65 ids finished here, oldest first: a participant remembers the last 64."""
    idle(ctx)
    ids = [ctx.new_id("fin") for _ in range(65)]
    for cid in ids:
        ctx.ok("resume", checkpoint_id=cid)
    ctx.oldest_finished, ctx.finished_id = ids[0], ids[-1]


def preparing(ctx: Ctx) -> None:
    """A turn in flight and a prepare that missed its deadline: preparing, with a blocker."""
    idle(ctx)
    for attempt in range(3):
        episode = EnvironmentEpisode(ctx.ep.rollout_id, attempt)
        ctx.start_turn(episode)
        cid = ctx.new_id("prep")
        reply = ctx.ok("prepare", checkpoint_id=cid, deadline_ts=time.time() + 0.05)
        if reply.get("phase") == "preparing":
            ctx.open_id, ctx.recorded["prepare"] = cid, reply
            ctx.ep = episode
            return
        ctx.ok("resume", checkpoint_id=cid)  # the turn ended first: try again
    raise StartFailed(
        "no prepare caught the turn in flight: data calls must last a few tenths of a second "
        "(envckpt.sim.server --model-latency 1 --tool-latency 1)"
    )


def prepared(ctx: Ctx, *, hold: bool = False) -> None:
    idle(ctx)
    if hold:
        ctx.hold(ctx.ep)
    cid = ctx.new_id("prep")
    reply = ctx.ok("prepare", checkpoint_id=cid)
    if reply.get("phase") != "prepared":
        raise StartFailed(f"prepare did not get ready: {reply}")
    ctx.open_id, ctx.recorded["prepare"] = cid, reply


def committed(ctx: Ctx, *, hold: bool = False) -> None:
    prepared(ctx, hold=hold)
    ctx.recorded["commit"] = ctx.ok(
        "commit", checkpoint_id=ctx.open_id, checkpoint_dir=str(ctx.commit_dir), episode_ids=None
    )


def restored(ctx: Ctx, *, hold: bool = False) -> None:
    """Restored under a new id from a published checkpoint: of nothing, or of ``ep``
    while this process still holds ``ep`` (the restore retires that older attempt)."""
    idle(ctx)
    if hold:
        ctx.hold(ctx.ep)
    publish(ctx)
    rid = ctx.new_id("rst")
    scope = [ctx.ep.to_wire()] if hold else []
    ctx.recorded["restore"] = ctx.ok(
        "restore", checkpoint_id=rid, checkpoint_dir=str(ctx.published_dir), episode_ids=scope
    )
    ctx.open_id = rid


def restored_live(ctx: Ctx) -> None:
    """``ep`` restored here as its next attempt and resumed: that attempt is live here."""
    restored(ctx, hold=True)
    ctx.ok("resume", checkpoint_id=ctx.open_id)
    ctx.finished_id, ctx.open_id = ctx.open_id, None


def prepared_restored_pending(ctx: Ctx) -> None:
    """``ep`` restored here as its next attempt, resumed, never run, and a new id prepared."""
    restored_live(ctx)
    cid = ctx.new_id("prep")
    reply = ctx.ok("prepare", checkpoint_id=cid)
    if reply.get("phase") != "prepared":
        raise StartFailed(f"prepare did not get ready: {reply}")
    ctx.open_id, ctx.recorded["prepare"] = cid, reply


@dataclass(frozen=True, slots=True)
class Start:
    """A starting point: its phase, what it needs from the target, how to reach it."""

    phase: str
    reach: Callable[[Ctx], None]
    state: bool = False  # needs the data routes to hold state
    inflight: bool = False  # needs a turn in flight (never in restart_only)


STARTS: dict[str, Start] = {
    "idle": Start("idle", idle),
    "idle+held": Start("idle", held, state=True),
    "idle+retired": Start("idle", retired, state=True),
    "idle+published": Start("idle", published),
    "idle+published+held": Start("idle", published_held, state=True),
    "idle+restored_before": Start("idle", restored_before, state=True),
    "idle+restored_live": Start("idle", restored_live, state=True),
    "idle+65_finished": Start("idle", last_of_many_finished),
    "preparing": Start("preparing", preparing, state=True, inflight=True),
    "prepared": Start("prepared", prepared),
    "prepared+held": Start("prepared", lambda ctx: prepared(ctx, hold=True), state=True),
    "prepared+restored_pending": Start("prepared", prepared_restored_pending, state=True),
    "committed": Start("committed", committed),
    "committed+held": Start("committed", lambda ctx: committed(ctx, hold=True), state=True),
    "restored": Start("restored", restored),
    "restored+held": Start("restored", lambda ctx: restored(ctx, hold=True), state=True),
}
