"""The four machine declarations envckpt runs on, with their states as named values.

* ``INSTANCE_LIFECYCLE`` (``InstanceState``): the coordinator's view of one Gym
  instance.
* ``PARTICIPANT_PHASES`` (``Phase``, from ``envckpt.protocol``: phases are on
  the wire): one participant's checkpoint phase (protocol.md 4).
* ``SNAPSHOT_SESSION`` (``SessionState``): the order of one rollout snapshot in
  the facade.
* ``ROLLOUT_LEDGER`` (``LedgerStatus``): the status of one rollout in the
  trainer's recovery ledger.

Rules the tables keep: a failure that must be remembered is a state, never a
flag beside it; every state is reachable and every non-terminal state has a
way out; a row never depends on anything but (state, trigger), so a refusal
needs no I/O. Sets of states the code asks about are named here (the
``StateGroup`` constants below), so no caller repeats a list of states.

Each table's ``chart`` says how its statechart is drawn (direction, happy
path, failure states, boxes); a box is one of the groups above or, where
marked "chart only", a set no code asks about. Changing a chart never changes
what is legal; the tests read every chart back into the table's transitions.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from envckpt.machines.table import STAYS, ChartLayout, MachineTable, Row, StateGroup
from envckpt.protocol import Phase


class InstanceState(StrEnum):
    UNDISCOVERED = "undiscovered"
    DISCOVERED = "discovered"
    PREPARING = "preparing"
    PREPARED = "prepared"
    COMMITTED = "committed"
    RESUMED = "resumed"
    RESTORED = "restored"
    FAILED = "failed"
    RESTORE_FAILED = "restore_failed"


class SessionState(StrEnum):
    OPENED = "opened"
    PREPARED = "prepared"
    COMMITTED = "committed"
    VERIFIED = "verified"
    RESUMED = "resumed"
    ABORTED = "aborted"


class LedgerStatus(StrEnum):
    RESERVED = "reserved"
    DISPATCHED = "dispatched"
    SEALED = "sealed"
    FAILED = "failed"
    ABANDONED = "abandoned"


_I = InstanceState

# A checkpoint is open on the instance's participants; every one of these
# states can be resumed (which also aborts).
CHECKPOINT_OPEN = StateGroup(
    "checkpoint open",
    frozenset({_I.PREPARING, _I.PREPARED, _I.COMMITTED}),
    "participants hold admission closed under one checkpoint id",
)
# Where a prepare may start. A prepare that failed half-way may have opened a
# checkpoint, so ``fail`` is legal here too.
PREPARE_STARTS = StateGroup(
    "may prepare", frozenset({_I.DISCOVERED, _I.RESUMED, _I.PREPARING}), "a prepare may start"
)
# Nothing has been done to the deployment yet: only these may restore.
FRESH = StateGroup("fresh", frozenset({_I.UNDISCOVERED, _I.DISCOVERED}), "may restore")
# A restore may have installed attempts here: dropping it must retire them.
HOLDS_RESTORE = StateGroup(
    "holds a restore", frozenset({_I.RESTORED, _I.RESTORE_FAILED}), "abandon before leaving"
)
_OPEN = tuple(sorted(CHECKPOINT_OPEN.states))

INSTANCE_LIFECYCLE: MachineTable[InstanceState] = MachineTable(
    name="instance_lifecycle",
    title="Gym instance lifecycle (coordinator side)",
    states=tuple(InstanceState),
    initial=_I.UNDISCOVERED,
    rows=(
        Row("discover", (_I.UNDISCOVERED,), _I.DISCOVERED, "status on every server"),
        Row(
            "prepare",
            (_I.DISCOVERED, _I.RESUMED, _I.PREPARING),
            _I.PREPARED,
            "every participant parked at a boundary",
        ),
        Row(
            "prepare_blocked",
            (_I.DISCOVERED, _I.RESUMED, _I.PREPARING),
            _I.PREPARING,
            "blockers reported; admission stays closed",
        ),
        Row("renew", (*_OPEN, _I.RESTORED), STAYS, "extend the lease"),
        Row("commit", (_I.PREPARED,), _I.COMMITTED, "scope exported and published"),
        Row(
            "resume",
            (*_OPEN, _I.RESTORED, _I.FAILED, _I.RESTORE_FAILED),
            _I.RESUMED,
            "reopen admission (also aborts)",
        ),
        Row("retire", (_I.DISCOVERED, _I.RESUMED, _I.RESTORED, _I.RESTORE_FAILED), STAYS),
        Row("forget", (_I.DISCOVERED, _I.RESUMED, _I.RESTORED), STAYS),
        Row("restore", (_I.DISCOVERED,), _I.RESTORED, "fresh deployment only"),
        Row(
            "fail",
            (_I.DISCOVERED, _I.RESUMED, *_OPEN),
            _I.FAILED,
            "a control call failed; a checkpoint may be open, so only resume may follow",
        ),
        Row(
            "fail_restore",
            (_I.DISCOVERED,),
            _I.RESTORE_FAILED,
            "a participant refused or failed the restore",
        ),
        Row(
            "abandon_restore",
            (_I.RESTORED,),
            _I.RESTORE_FAILED,
            "another instance failed, or the caller raised",
        ),
    ),
    groups=(CHECKPOINT_OPEN, PREPARE_STARTS, FRESH, HOLDS_RESTORE),
    # restore_failed needs no note: its chart shows "⟲ retire" and resume.
    state_notes=((_I.FAILED, "a checkpoint is open and a call failed; resume (abort) next"),),
    chart=ChartLayout(
        direction="TB",
        happy_path=(_I.UNDISCOVERED, _I.DISCOVERED, _I.PREPARED, _I.COMMITTED, _I.RESUMED),
        failure=frozenset({_I.FAILED, _I.RESTORE_FAILED}),
        boxes=(CHECKPOINT_OPEN,),
    ),
)

# A participant's phases with a checkpoint open: admission is closed, the
# lease runs, and resume (or the lease) ends them.
PHASES_OPEN = StateGroup(
    "checkpoint open",
    frozenset({Phase.PREPARING, Phase.PREPARED, Phase.COMMITTED}),
    "admission closed under one checkpoint id",
)
_OPEN_PHASES = tuple(sorted(PHASES_OPEN.states))
# Chart only: the phases a lease runs in (resume or its expiry end them).
_LEASE_RUNS = StateGroup("lease runs", frozenset({*PHASES_OPEN.states, Phase.RESTORED}))

PARTICIPANT_PHASES: MachineTable[Phase] = MachineTable(
    name="participant_phases",
    title="Participant checkpoint phase (server side)",
    states=tuple(Phase),
    initial=Phase.IDLE,
    rows=(
        Row(
            "prepare",
            (Phase.IDLE, Phase.PREPARING),
            Phase.PREPARING,
            "admission closed, lease armed",
        ),
        Row("ready", (Phase.PREPARING,), Phase.PREPARED, "every live episode at a boundary"),
        Row("commit", (Phase.PREPARED,), Phase.COMMITTED, "records and manifest published"),
        Row("restore", (Phase.IDLE,), Phase.RESTORED, "no live attempt of a restored rollout"),
        Row("resume", (*_OPEN_PHASES, Phase.RESTORED), Phase.IDLE),
        Row("expire", (*_OPEN_PHASES, Phase.RESTORED), Phase.IDLE, "lease"),
    ),
    groups=(PHASES_OPEN,),
    chart=ChartLayout(
        direction="TB",
        happy_path=(Phase.IDLE, Phase.PREPARING, Phase.PREPARED, Phase.COMMITTED),
        boxes=(_LEASE_RUNS, PHASES_OPEN),
    ),
)

_S = SessionState

# Chart only: every state a snapshot can be aborted from.
_SNAPSHOT_IN_PROGRESS = StateGroup(
    "in progress", frozenset({_S.OPENED, _S.PREPARED, _S.COMMITTED, _S.VERIFIED})
)

SNAPSHOT_SESSION: MachineTable[SessionState] = MachineTable(
    name="snapshot_session",
    title="One rollout snapshot (facade side)",
    states=tuple(SessionState),
    initial=_S.OPENED,
    rows=(
        Row("prepare", (_S.OPENED,), _S.PREPARED, "retire dropped attempts, prepare all"),
        Row("commit", (_S.PREPARED,), _S.COMMITTED, "commit inventory, write manifest"),
        Row("check_cut", (_S.COMMITTED,), _S.VERIFIED, "state matches the ledger under the cut"),
        Row("resume", (_S.COMMITTED, _S.VERIFIED), _S.RESUMED, "context left cleanly"),
        Row("abort", (_S.OPENED, _S.PREPARED, _S.COMMITTED, _S.VERIFIED), _S.ABORTED),
    ),
    terminal=frozenset({_S.RESUMED, _S.ABORTED}),
    state_notes=(
        (_S.RESUMED, "the snapshot may be published"),
        (_S.ABORTED, "the snapshot is never restorable"),
    ),
    chart=ChartLayout(
        direction="TB",
        happy_path=(_S.OPENED, _S.PREPARED, _S.COMMITTED, _S.VERIFIED, _S.RESUMED),
        failure=frozenset({_S.ABORTED}),
        boxes=(_SNAPSHOT_IN_PROGRESS,),
    ),
)

_L = LedgerStatus

# Rollouts the trainer still owes a result: their current attempt may be held
# by an instance, and a restore must continue or abandon each one.
UNFINISHED = StateGroup(
    "unfinished", frozenset({_L.RESERVED, _L.DISPATCHED, _L.FAILED}), "owes a result"
)
# Chart only: the current attempt is reserved or running on its instance.
_ATTEMPT_LIVE = StateGroup("attempt live", frozenset({_L.RESERVED, _L.DISPATCHED}))
# Statuses whose data rows a restore keeps.
KEEPS_ROWS = StateGroup(
    "keeps rows", frozenset({_L.RESERVED, _L.DISPATCHED, _L.SEALED}), "rows still referenced"
)

ROLLOUT_LEDGER: MachineTable[LedgerStatus] = MachineTable(
    name="rollout_ledger",
    title="One rollout in the trainer's recovery ledger",
    states=tuple(LedgerStatus),
    initial=_L.RESERVED,
    rows=(
        Row("dispatch", (_L.RESERVED,), _L.DISPATCHED, "the attempt is sent to its instance"),
        Row("add_staging_keys", (_L.RESERVED, _L.DISPATCHED), STAYS, "the attempt wrote rows"),
        Row("seal", (_L.DISPATCHED,), _L.SEALED, "finished; the result is committed"),
        Row("fail", (_L.RESERVED, _L.DISPATCHED), _L.FAILED, "attempt dropped; retire it"),
        Row("abandon", (_L.RESERVED, _L.DISPATCHED, _L.FAILED), _L.ABANDONED, "given up"),
        Row(
            "mint_next_attempt",
            (_L.DISPATCHED, _L.FAILED),
            _L.RESERVED,
            "attempt + 1 on the same (or another) instance",
        ),
        Row("restart_from_task", (_L.ABANDONED,), _L.RESERVED, "attempt + 1, from the task"),
        Row(
            "continue_restored",
            (_L.RESERVED, _L.DISPATCHED),
            _L.RESERVED,
            "a restore continues the attempt as attempt + 1, held by its instance",
        ),
    ),
    terminal=frozenset({_L.SEALED}),
    groups=(UNFINISHED, KEEPS_ROWS),
    state_notes=((_L.SEALED, "forgotten once its dropped attempts are retired"),),
    chart=ChartLayout(
        direction="TB",
        happy_path=(_L.RESERVED, _L.DISPATCHED, _L.SEALED),
        failure=frozenset({_L.FAILED, _L.ABANDONED}),
        boxes=(UNFINISHED, _ATTEMPT_LIVE),
    ),
)

ALL_TABLES: tuple[MachineTable[Any], ...] = (
    INSTANCE_LIFECYCLE,
    PARTICIPANT_PHASES,
    SNAPSHOT_SESSION,
    ROLLOUT_LEDGER,
)
