"""The planted bugs of issue 23, each put into a copy inside this process only.

A plant never edits a file on disk: a table row is swapped for a copy with
one row changed, and a function is recompiled from its source with one line
changed and set in place of the original (``pytest``'s ``monkeypatch`` puts
everything back when the test ends).

    with pytest.MonkeyPatch.context() as patch:
        plant_commit_from_preparing(patch)
        result = explore(config)          # now finds the bug
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
import types
from typing import Any

import pytest

from envckpt.facade import restore as facade_restore
from envckpt.gym import adapter as gym_adapter
from envckpt.machines import binding
from envckpt.machines.table import Row
from envckpt.machines.tables import INSTANCE_LIFECYCLE, InstanceState
from envckpt.participant import core as participant_core


def plant_commit_from_preparing(patch: pytest.MonkeyPatch) -> None:
    """(a) The lifecycle's ``commit`` row also starts from ``preparing``."""
    rows = tuple(
        dataclasses.replace(row, sources=(*row.sources, InstanceState.PREPARING))
        if row.trigger == "commit"
        else row
        for row in INSTANCE_LIFECYCLE.rows
    )
    assert all(isinstance(row, Row) for row in rows)
    wrong = dataclasses.replace(INSTANCE_LIFECYCLE, rows=rows)
    patch.setattr(gym_adapter, "_LIFECYCLE", binding.BoundMachine(wrong))


def plant_partial_participant_restore(patch: pytest.MonkeyPatch) -> None:
    """(b) A restore goes on when the deployment lacks a server that saved state."""
    checked = _edited(
        facade_restore.check_restorable,
        "missing = sorted(set(record.participants) - set(names[iid]))",
        "missing: list[str] = []",
    )
    patch.setattr(facade_restore, "check_restorable", checked)
    from envckpt.facade import checkpoint as facade_checkpoint

    if hasattr(facade_checkpoint, "check_restorable"):
        patch.setattr(facade_checkpoint, "check_restorable", checked)
    restore = _edited(
        gym_adapter.GymCheckpointAdapter.restore,
        "missing = sorted(set(participants) - self.participants.names)",
        "missing: list[str] = []",
    )
    patch.setattr(gym_adapter.GymCheckpointAdapter, "restore", restore)


def plant_prepare_without_finished_check(patch: pytest.MonkeyPatch) -> None:
    """(c) Prepare no longer refuses a finished checkpoint id."""
    prepare = _edited(
        participant_core.ParticipantCore.prepare,
        "self.finished.refuse(checkpoint_id)",
        "pass",
    )
    patch.setattr(participant_core.ParticipantCore, "prepare", prepare)


PLANTS = {
    "commit_from_preparing": plant_commit_from_preparing,
    "partial_participant_restore": plant_partial_participant_restore,
    "prepare_without_finished_check": plant_prepare_without_finished_check,
}


def _edited(function: Any, old: str, new: str) -> Any:
    """``function`` recompiled from its source with the one line ``old`` made ``new``."""
    source = textwrap.dedent(inspect.getsource(function))
    if source.count(old) != 1:
        raise ValueError(f"{function.__qualname__}: {old!r} is not one line of its source")
    code = compile(source.replace(old, new), inspect.getfile(function), "exec")
    namespace: dict[str, Any] = {}
    # A copy of our own source, compiled in its own module namespace.
    exec(code, function.__globals__, namespace)
    edited = namespace[function.__name__]
    assert isinstance(edited, types.FunctionType)
    # A method using super() or a closure would need its cell; none of ours does.
    return edited
