"""The three machine declarations envckpt runs on.

* ``INSTANCE_LIFECYCLE``: the coordinator's view of one Gym instance.
* ``PARTICIPANT_PHASES``: one participant's checkpoint phase (protocol.md 4).
* ``SNAPSHOT_SESSION``: the order of one rollout snapshot in the facade.

Rules the tables keep: a failure that must be remembered is a state, never a
flag beside it; every state is reachable and has a way out; a row never
depends on anything but (state, trigger), so a refusal needs no I/O.
"""

from __future__ import annotations

from envckpt.machines.table import SAME, MachineTable, Row

# States with a checkpoint open on the instance's participants; every one of
# them can be resumed (which also aborts). A prepare that failed half-way may
# have opened one too, so ``fail`` is also legal where prepare starts.
_OPEN = ("preparing", "prepared", "committed")

INSTANCE_LIFECYCLE = MachineTable(
    name="instance_lifecycle",
    title="Gym instance lifecycle (coordinator side)",
    states=(
        "undiscovered",
        "discovered",
        "preparing",
        "prepared",
        "committed",
        "resumed",
        "restored",
        "failed",
        "restore_failed",
    ),
    initial="undiscovered",
    rows=(
        Row("discover", ("undiscovered",), "discovered", "status on every server"),
        Row(
            "prepare",
            ("discovered", "resumed", "preparing"),
            "prepared",
            "every participant parked at a boundary",
        ),
        Row(
            "prepare_blocked",
            ("discovered", "resumed", "preparing"),
            "preparing",
            "blockers reported; admission stays closed",
        ),
        Row("renew", (*_OPEN, "restored"), SAME, "extend the lease"),
        Row("commit", ("prepared",), "committed", "scope exported and published"),
        Row(
            "resume",
            (*_OPEN, "restored", "failed", "restore_failed"),
            "resumed",
            "reopen admission (also aborts)",
        ),
        Row("retire", ("discovered", "resumed", "restored", "restore_failed"), SAME),
        Row("forget", ("discovered", "resumed", "restored"), SAME),
        Row("restore", ("discovered",), "restored", "fresh deployment only"),
        Row(
            "fail",
            ("discovered", "resumed", *_OPEN),
            "failed",
            "a control call failed; a checkpoint may be open, so only resume may follow",
        ),
        Row(
            "fail_restore",
            ("discovered",),
            "restore_failed",
            "a participant refused or failed the restore",
        ),
        Row(
            "abandon_restore",
            ("restored",),
            "restore_failed",
            "another instance failed, or the caller raised",
        ),
    ),
    state_notes=(
        ("failed", "a checkpoint is open and a call failed; resume (abort) next"),
        ("restore_failed", "retire the next attempts everywhere, then resume"),
    ),
)

PARTICIPANT_PHASES = MachineTable(
    name="participant_phases",
    title="Participant checkpoint phase (server side)",
    states=("idle", "preparing", "prepared", "committed", "restored"),
    initial="idle",
    rows=(
        Row("prepare", ("idle", "preparing"), "preparing", "admission closed, lease armed"),
        Row("ready", ("preparing",), "prepared", "every live episode at a boundary"),
        Row("commit", ("prepared",), "committed", "records and manifest published"),
        Row("restore", ("idle",), "restored", "fresh process only"),
        Row("resume", ("preparing", "prepared", "committed", "restored"), "idle"),
        Row("expire", ("preparing", "prepared", "committed", "restored"), "idle", "lease"),
    ),
)

SNAPSHOT_SESSION = MachineTable(
    name="snapshot_session",
    title="One rollout snapshot (facade side)",
    states=("opened", "prepared", "committed", "verified", "resumed", "aborted"),
    initial="opened",
    rows=(
        Row("prepare", ("opened",), "prepared", "retire dropped attempts, prepare all"),
        Row("commit", ("prepared",), "committed", "commit inventory, write manifest"),
        Row("check_cut", ("committed",), "verified", "state matches the ledger under the cut"),
        Row("resume", ("committed", "verified"), "resumed", "context left cleanly"),
        Row("abort", ("opened", "prepared", "committed", "verified"), "aborted"),
    ),
    state_notes=(
        ("resumed", "terminal: the snapshot may be published"),
        ("aborted", "terminal: the snapshot is never restorable"),
    ),
)

ALL_TABLES: tuple[MachineTable, ...] = (INSTANCE_LIFECYCLE, PARTICIPANT_PHASES, SNAPSHOT_SESSION)

# Terminal states: a session ends there; every other state needs an exit.
TERMINAL_STATES: dict[str, frozenset[str]] = {
    SNAPSHOT_SESSION.name: frozenset({"resumed", "aborted"}),
}
