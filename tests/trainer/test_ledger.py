"""Tests for envckpt.trainer.ledger."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import CorruptCheckpoint, GymCheckpointUnavailable, ProtocolViolation
from envckpt.interfaces import RestoredEnvironmentRollouts
from envckpt.inventory import SnapshotContents
from envckpt.trainer.barrier import Cut, CutExpired
from envckpt.trainer.ledger import (
    KIND,
    LedgerCorrupt,
    LedgerEntry,
    LedgerError,
    LedgerStatus,
    RecoveryLedger,
    RestoreMismatch,
)

from helpers.cuts import dead_cut, live_cut
from helpers.examples import examples

Ep = EnvironmentEpisode


class Rows:
    """A stand-in data plane: the staging keys that exist."""

    def __init__(self, keys: Iterable[str]) -> None:
        self.rows = set(keys)

    def missing_keys(self, keys: Iterable[str]) -> frozenset[str]:
        return frozenset(set(keys) - self.rows)


def running_ledger() -> RecoveryLedger:
    """r-run dispatched on i0 with keys, r-new reserved on i1, r-done sealed on i0."""
    ledger = RecoveryLedger()
    c = live_cut()
    ledger.reserve(c, "r-run", "i0")
    ledger.dispatch(c, "r-run")
    ledger.add_staging_keys(c, "r-run", ["s-run-1", "s-run-2"])
    ledger.reserve(c, "r-new", "i1")
    ledger.reserve(c, "r-done", "i0")
    ledger.dispatch(c, "r-done")
    ledger.add_staging_keys(c, "r-done", ["s-done"])
    ledger.seal(c, "r-done")
    return ledger


def contents(
    exported: dict[str, tuple[Ep, ...]],
    restarts: dict[str, tuple[Ep, ...]] | None = None,
    staging_keys: dict[str, tuple[str, ...]] | None = None,
) -> SnapshotContents:
    return SnapshotContents("ckpt-1", exported, restarts or {}, staging_keys or {})


# ---- lifecycle -----------------------------------------------------------------


def test_lifecycle_reserve_dispatch_seal() -> None:
    """A rollout goes reserved -> dispatched -> sealed at attempt 0 and collects keys."""
    ledger = RecoveryLedger()
    entry = ledger.reserve(live_cut(), "r1", "i0")
    assert entry == LedgerEntry("r1", 0, "i0", LedgerStatus.RESERVED)
    assert ledger.dispatch(live_cut(), "r1").status is LedgerStatus.DISPATCHED
    ledger.add_staging_keys(live_cut(), "r1", ["b", "a"])
    assert ledger.add_staging_keys(live_cut(), "r1", ["a", "c"]).staging_keys == ("a", "b", "c")
    sealed = ledger.seal(live_cut(), "r1")
    assert (sealed.status, sealed.attempt, sealed.instance_id) == (LedgerStatus.SEALED, 0, "i0")
    assert ledger.entry("r1") == sealed
    assert "r1" in ledger and len(ledger) == 1


def test_fail_then_mint_next_attempt_drops_the_old_one() -> None:
    """A failed attempt is dropped on its instance and re-minted as attempt + 1, reserved."""
    ledger = running_ledger()
    ledger.fail(live_cut(), "r-run")
    assert ledger.dropped_attempts("i0") == (Ep("r-run", 0),)
    minted = ledger.mint_next_attempt(live_cut(), "r-run", instance_id="i2")
    assert minted == LedgerEntry("r-run", 1, "i2", LedgerStatus.RESERVED)
    assert ledger.inventory("i0") == ()
    ledger.dispatch(live_cut(), "r-run")
    assert ledger.inventory("i2") == (Ep("r-run", 1),)
    assert ledger.dropped_attempts("i0") == (Ep("r-run", 0),)


def test_mint_from_dispatched_drops_the_running_attempt() -> None:
    """Re-minting a dispatched attempt (a timeout) drops it on its instance."""
    ledger = running_ledger()
    assert ledger.mint_next_attempt(live_cut(), "r-run").attempt == 1
    assert ledger.dropped_attempts("i0") == (Ep("r-run", 0),)


def test_fail_of_a_reserved_attempt_drops_nothing() -> None:
    """An attempt that was never sent has nothing on its instance to retire."""
    ledger = running_ledger()
    ledger.fail(live_cut(), "r-new")
    assert ledger.dropped_attempts("i1") == ()


def test_abandon_keeps_staging_keys_listed() -> None:
    """Abandoning a dispatched rollout drops its attempt and keeps its keys for deletion."""
    ledger = running_ledger()
    abandoned = ledger.abandon(live_cut(), "r-run")
    assert abandoned.status is LedgerStatus.ABANDONED
    assert abandoned.staging_keys == ("s-run-1", "s-run-2")
    assert ledger.dropped_attempts("i0") == (Ep("r-run", 0),)


@pytest.mark.parametrize(
    ("action", "rollout_id", "status"),
    [
        (lambda led: led.seal(live_cut(), "r-new"), "r-new", "reserved"),
        (lambda led: led.dispatch(live_cut(), "r-run"), "r-run", "dispatched"),
        (lambda led: led.mint_next_attempt(live_cut(), "r-new"), "r-new", "reserved"),
        (lambda led: led.restart_from_task(live_cut(), "r-run"), "r-run", "dispatched"),
        (lambda led: led.fail(live_cut(), "r-done"), "r-done", "sealed"),
        (lambda led: led.abandon(live_cut(), "r-done"), "r-done", "sealed"),
        (lambda led: led.add_staging_keys(live_cut(), "r-done", ["x"]), "r-done", "sealed"),
        (lambda led: led.reserve(live_cut(), "r-run", "i1"), "r-run", "dispatched"),
        (lambda led: led.dispatch(live_cut(), "r-unknown"), "r-unknown", ""),
        (lambda led: led.forgotten(live_cut(), ["r-run"]), "r-run", "dispatched"),
    ],
)
def test_illegal_transitions_raise_and_change_nothing(
    action: Callable[[RecoveryLedger], Any], rollout_id: str, status: str
) -> None:
    """A call the rollout's status does not allow raises LedgerError and leaves the ledger as is."""
    ledger = running_ledger()
    before = ledger.to_bytes()
    with pytest.raises(LedgerError) as info:
        action(ledger)
    assert info.value.rollout_id == rollout_id
    assert info.value.status == status
    assert ledger.to_bytes() == before


@pytest.mark.parametrize(
    "action",
    [
        lambda led, c: led.reserve(c, "r-x", "i0"),
        lambda led, c: led.dispatch(c, "r-new"),
        lambda led, c: led.add_staging_keys(c, "r-run", ["k"]),
        lambda led, c: led.seal(c, "r-run"),
        lambda led, c: led.fail(c, "r-run"),
        lambda led, c: led.abandon(c, "r-run"),
        lambda led, c: led.mint_next_attempt(c, "r-run"),
        lambda led, c: led.forgotten(c, []),
        lambda led, c: led.prepare_for_restart(c, RestoredEnvironmentRollouts()),
    ],
)
def test_mutators_refuse_an_expired_cut(action: Callable[[RecoveryLedger, Cut], Any]) -> None:
    """Every mutator checks its cut first: an expired cut raises and changes nothing."""
    ledger = running_ledger()
    before = ledger.to_bytes()
    with pytest.raises(CutExpired):
        action(ledger, dead_cut())
    assert ledger.to_bytes() == before


# ---- inventory, dropped, retired, forget -----------------------------------------


def test_inventory_lists_dispatched_current_attempts_only() -> None:
    """The inventory holds dispatched attempts; reserved-never-sent and sealed are left out."""
    ledger = running_ledger()
    assert ledger.inventory("i0") == (Ep("r-run", 0),)
    assert ledger.inventory("i1") == ()
    assert ledger.inventory("nowhere") == ()
    assert ledger.instances() == ("i0", "i1")


def test_inventory_names_restored_rollouts_by_their_replacement_attempt() -> None:
    """A rollout restored but not yet re-sent is in the inventory as attempt + 1."""
    ledger = running_ledger()
    ledger.prepare_for_restart(
        live_cut(), RestoredEnvironmentRollouts(continued_attempts=frozenset({("i0", "r-run", 0)}))
    )
    assert ledger.entry("r-run").status is LedgerStatus.RESERVED
    assert ledger.inventory("i0") == (Ep("r-run", 1),)
    ledger.dispatch(live_cut(), "r-run")
    assert ledger.inventory("i0") == (Ep("r-run", 1),)
    assert not ledger.entry("r-run").restored


def test_retired_clears_dropped_and_makes_finished_rollouts_forgettable() -> None:
    """Finished rollouts become forgettable once every dropped attempt was retired."""
    ledger = running_ledger()
    ledger.fail(live_cut(), "r-run")
    ledger.mint_next_attempt(live_cut(), "r-run")
    ledger.dispatch(live_cut(), "r-run")
    ledger.seal(live_cut(), "r-run")
    assert ledger.forgettable() == ("r-done",)
    ledger.retired("i0", (Ep("r-run", 0),))
    assert ledger.dropped_attempts("i0") == ()
    assert ledger.forgettable() == ("r-done", "r-run")
    ledger.forgotten(live_cut(), ["r-done", "r-run"])
    assert [entry.rollout_id for entry in ledger.entries()] == ["r-new"]
    assert ledger.instances() == ("i1",)
    ledger.retired("i9", (Ep("r-x", 0),))  # nothing dropped there: no effect


# ---- verify_against_cut ---------------------------------------------------------


async def test_verify_passes_on_agreement() -> None:
    """Exported plus restarted episodes covering the inventory, with rows present, pass."""
    ledger = running_ledger()
    ledger.reserve(live_cut(), "r-two", "i1")
    ledger.dispatch(live_cut(), "r-two")
    agreeing = contents(
        {"i0": (Ep("r-run", 0),)},
        restarts={"i1": (Ep("r-two", 0),)},
        staging_keys={"i0": ("s-run-1",)},
    )
    await ledger.verify_against_cut(live_cut(), agreeing, data_plane=Rows({"s-run-1", "s-run-2"}))
    with_plane = RecoveryLedger.from_bytes(ledger.to_bytes(), data_plane=Rows({"s-run-1"}))
    await with_plane.verify_against_cut(live_cut(), agreeing)


async def test_verify_refuses_an_exported_episode_since_sealed() -> None:
    """An exported episode the ledger has since sealed is a protocol violation."""
    ledger = running_ledger()
    exported = contents({"i0": (Ep("r-run", 0), Ep("r-done", 0))})
    with pytest.raises(ProtocolViolation, match="no longer a live attempt"):
        await ledger.verify_against_cut(live_cut(), exported)


async def test_verify_refuses_an_exported_episode_since_reminted() -> None:
    """An exported attempt the ledger has since replaced by a new attempt is refused."""
    ledger = running_ledger()
    ledger.mint_next_attempt(live_cut(), "r-run")
    ledger.dispatch(live_cut(), "r-run")
    stale = contents({"i0": (Ep("r-run", 0),)}, restarts={"i0": (Ep("r-run", 1),)})
    with pytest.raises(ProtocolViolation, match="no longer a live attempt"):
        await ledger.verify_against_cut(live_cut(), stale)


async def test_verify_refuses_an_episode_owned_by_another_instance() -> None:
    """An instance exporting an episode the ledger places elsewhere is refused."""
    ledger = running_ledger()
    wrong = contents({"i0": (Ep("r-run", 0),), "i1": (Ep("r-run", 0),)})
    with pytest.raises(ProtocolViolation, match="places on i0"):
        await ledger.verify_against_cut(live_cut(), wrong)


async def test_verify_asks_for_a_retry_when_a_live_episode_is_missing() -> None:
    """A ledger-owned episode neither exported nor restarted is retryable (reply on the wire)."""
    ledger = running_ledger()
    with pytest.raises(GymCheckpointUnavailable) as info:
        await ledger.verify_against_cut(live_cut(), contents({}))
    assert "i0" in info.value.failures


async def test_verify_refuses_a_staging_key_missing_from_the_data_plane() -> None:
    """A kept staging key with no row in the data plane is refused."""
    ledger = running_ledger()
    keyed = contents({"i0": (Ep("r-run", 0),)}, staging_keys={"i0": ("s-run-1", "s-gone")})
    with pytest.raises(ProtocolViolation, match="s-gone"):
        await ledger.verify_against_cut(live_cut(), keyed, data_plane=Rows({"s-run-1"}))


async def test_verify_refuses_an_expired_cut() -> None:
    """verify_against_cut checks its cut before anything else."""
    with pytest.raises(CutExpired):
        await running_ledger().verify_against_cut(dead_cut(), contents({}))


# ---- prepare_for_restart ----------------------------------------------------------


def restart_ledger() -> RecoveryLedger:
    """running_ledger plus r-fail (failed on i1) and r-lost (dispatched on i1, not restored)."""
    ledger = running_ledger()
    c = live_cut()
    for rollout_id in ("r-fail", "r-lost"):
        ledger.reserve(c, rollout_id, "i1")
        ledger.dispatch(c, rollout_id)
    ledger.add_staging_keys(c, "r-lost", ["s-lost"])
    ledger.fail(c, "r-fail")
    return ledger


def test_prepare_for_restart_continues_exactly_the_restored_triples() -> None:
    """Restored triples continue as attempt + 1; sent ones are abandoned; unsent ones wait."""
    ledger = restart_ledger()
    restored = RestoredEnvironmentRollouts(
        continued_attempts=frozenset({("i0", "r-run", 0)}),
        staging_keys=frozenset({"s-run-1", "s-extra"}),
    )
    plan = ledger.prepare_for_restart(live_cut(), restored)
    assert plan.continued == (
        LedgerEntry(
            "r-run",
            1,
            "i0",
            LedgerStatus.RESERVED,
            staging_keys=("s-run-1", "s-run-2"),
            restored=True,
        ),
    )
    assert sorted(entry.rollout_id for entry in plan.abandoned) == ["r-fail", "r-lost"]
    assert ledger.entry("r-new") == LedgerEntry("r-new", 0, "i1", LedgerStatus.RESERVED)
    assert all(ledger.entry(e.rollout_id).status is LedgerStatus.ABANDONED for e in plan.abandoned)
    assert ledger.entry("r-done").status is LedgerStatus.SEALED
    assert plan.keep_staging_keys == {"s-run-1", "s-run-2", "s-extra", "s-done"}
    assert plan.clear_staging_keys == {"s-lost"}
    # r-lost was on i1 and r-fail already dropped there; r-new was never sent.
    assert ledger.dropped_attempts("i1") == (Ep("r-fail", 0), Ep("r-lost", 0))
    assert ledger.inventory("i0") == (Ep("r-run", 1),)
    assert ledger.inventory("i1") == ()


def test_abandoned_rollouts_restart_from_their_task_after_restored_ones() -> None:
    """restart_from_task gives an abandoned rollout a higher attempt, sent after restored ones."""
    ledger = restart_ledger()
    plan = ledger.prepare_for_restart(
        live_cut(), RestoredEnvironmentRollouts(continued_attempts=frozenset({("i0", "r-run", 0)}))
    )
    for entry in plan.abandoned:
        ledger.restart_from_task(live_cut(), entry.rollout_id)
    restarted = ledger.entry("r-lost")
    assert restarted == LedgerEntry("r-lost", 1, "i1", LedgerStatus.RESERVED)
    order = [entry.rollout_id for entry in ledger.redispatch_order()]
    assert order[0] == "r-run"
    assert sorted(order[1:]) == ["r-fail", "r-lost", "r-new"]


def test_a_second_restore_continues_a_restored_attempt() -> None:
    """A rollout restored and snapshotted before re-sending is restorable again (attempt + 1)."""
    ledger = restart_ledger()
    triples = frozenset({("i0", "r-run", 0)})
    ledger.prepare_for_restart(live_cut(), RestoredEnvironmentRollouts(continued_attempts=triples))
    again = frozenset({("i0", "r-run", 1)})
    plan = ledger.prepare_for_restart(
        live_cut(), RestoredEnvironmentRollouts(continued_attempts=again)
    )
    assert [entry.episode for entry in plan.continued] == [Ep("r-run", 2)]


@pytest.mark.parametrize(
    ("triple", "reason"),
    [
        (("i0", "r-ghost", 0), "unknown"),
        (("i0", "r-run", 3), "attempt"),
        (("i1", "r-run", 0), "places it on i0"),
        (("i0", "r-done", 0), "not restorable"),
        (("i1", "r-new", 0), "not restorable"),
    ],
)
def test_prepare_for_restart_rejects_mismatched_triples(
    triple: tuple[str, str, int], reason: str
) -> None:
    """A restored triple the ledger does not hold as restorable raises and changes nothing."""
    ledger = restart_ledger()
    before = ledger.to_bytes()
    restored = RestoredEnvironmentRollouts(continued_attempts=frozenset({triple}))
    with pytest.raises(RestoreMismatch, match=reason) as info:
        ledger.prepare_for_restart(live_cut(), restored)
    assert isinstance(info.value, ProtocolViolation)
    assert len(info.value.mismatches) == 1
    assert ledger.to_bytes() == before


def test_prepare_for_restart_rejects_a_rollout_restored_twice() -> None:
    """Two triples naming one rollout are refused."""
    ledger = restart_ledger()
    triples = frozenset({("i0", "r-run", 0), ("i1", "r-run", 0)})
    with pytest.raises(RestoreMismatch):
        ledger.prepare_for_restart(
            live_cut(), RestoredEnvironmentRollouts(continued_attempts=triples)
        )


# ---- save and load -------------------------------------------------------------


def test_save_load_round_trip(tmp_path: Path) -> None:
    """A saved ledger loads back equal, in the same order, with its dropped attempts."""
    ledger = restart_ledger()
    ledger.prepare_for_restart(
        live_cut(), RestoredEnvironmentRollouts(continued_attempts=frozenset({("i0", "r-run", 0)}))
    )
    path = tmp_path / "ledger.json"
    written = ledger.save(path)
    assert written == path.stat().st_size
    assert [p.name for p in tmp_path.iterdir()] == ["ledger.json"]
    loaded = RecoveryLedger.load(path)
    assert loaded.entries() == ledger.entries()
    assert loaded.dropped_attempts("i1") == ledger.dropped_attempts("i1")
    assert loaded.redispatch_order() == ledger.redispatch_order()
    assert loaded.to_bytes() == ledger.to_bytes()
    document = json.loads(path.read_bytes())
    assert (document["kind"], document["schema_version"]) == (KIND, 1)


def rewrite(path: Path, change: Callable[[dict[str, Any]], None], *, reseal: bool) -> None:
    """Edit the saved document; with reseal, recompute the checksum so only the edit counts."""
    import hashlib

    document = json.loads(path.read_bytes())
    change(document)
    if reseal:
        body = {name: value for name, value in document.items() if name != "sha256"}
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        document["sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
    path.write_text(json.dumps(document))


def test_load_refuses_a_checksum_mismatch(tmp_path: Path) -> None:
    """A ledger edited after saving fails its checksum."""
    path = tmp_path / "ledger.json"
    running_ledger().save(path)
    rewrite(path, lambda doc: doc["entries"][0].update(attempt=7), reseal=False)
    with pytest.raises(LedgerCorrupt, match="checksum"):
        RecoveryLedger.load(path)


@pytest.mark.parametrize("version", [0, 2, "1", True])
def test_load_refuses_another_schema(tmp_path: Path, version: object) -> None:
    """A ledger of an older or newer schema is refused even with a valid checksum."""
    path = tmp_path / "ledger.json"
    running_ledger().save(path)
    rewrite(path, lambda doc: doc.update(schema_version=version), reseal=True)
    with pytest.raises(LedgerCorrupt, match="schema"):
        RecoveryLedger.load(path)


def test_load_refuses_a_foreign_kind(tmp_path: Path) -> None:
    """A checksummed JSON file of another kind is refused."""
    path = tmp_path / "ledger.json"
    running_ledger().save(path)
    rewrite(path, lambda doc: doc.update(kind="envckpt.manifest"), reseal=True)
    with pytest.raises(LedgerCorrupt, match="foreign"):
        RecoveryLedger.load(path)


@pytest.mark.parametrize("keep", [0, 1, 0.5, -1])
def test_load_refuses_a_truncated_file(tmp_path: Path, keep: float) -> None:
    """A ledger cut short anywhere (even by its last byte) is refused."""
    path = tmp_path / "ledger.json"
    running_ledger().save(path)
    data = path.read_bytes().rstrip(b"\n")
    cut_at = {0: 0, 1: 1, 0.5: len(data) // 2, -1: len(data) - 1}[keep]
    path.write_bytes(data[:cut_at])
    with pytest.raises(LedgerCorrupt) as info:
        RecoveryLedger.load(path)
    assert isinstance(info.value, CorruptCheckpoint)
    assert info.value.path == str(path)


def test_load_refuses_a_missing_file(tmp_path: Path) -> None:
    """A snapshot without its ledger is refused as corrupt."""
    with pytest.raises(LedgerCorrupt, match="missing"):
        RecoveryLedger.load(tmp_path / "ledger.json")


def test_load_refuses_invalid_content_with_a_valid_checksum(tmp_path: Path) -> None:
    """Well-sealed but invalid content (a rollout twice, a bad status) is refused."""
    path = tmp_path / "ledger.json"
    running_ledger().save(path)
    rewrite(path, lambda doc: doc["entries"].append(doc["entries"][0]), reseal=True)
    with pytest.raises(LedgerCorrupt, match="twice"):
        RecoveryLedger.load(path)
    running_ledger().save(path)
    rewrite(path, lambda doc: doc["entries"][0].update(status="paused"), reseal=True)
    with pytest.raises(LedgerCorrupt, match="invalid"):
        RecoveryLedger.load(path)


# ---- property test: random operation sequences against a reference model ------------

ROLLOUTS = ("r0", "r1", "r2", "r3", "r4", "r5")
INSTANCES = ("i0", "i1", "i2")
KEYS = ("k0", "k1", "k2", "k3", "k4")


@dataclass
class Ref:
    attempt: int
    instance: str
    status: str
    restored: bool = False
    keys: set[str] = field(default_factory=set)

    @property
    def on_instance(self) -> bool:
        return self.status == "dispatched" or self.restored


ALLOWED = {
    "dispatch": {"reserved"},
    "add_staging_keys": {"reserved", "dispatched"},
    "seal": {"dispatched"},
    "fail": {"reserved", "dispatched"},
    "abandon": {"reserved", "dispatched", "failed"},
    "mint_next_attempt": {"dispatched", "failed"},
    "restart_from_task": {"abandoned"},
}
ACTIONS = tuple(sorted(ALLOWED))


class LedgerMachine(RuleBasedStateMachine):
    """Drives a ledger and a small reference model with the same calls."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = RecoveryLedger()
        self.refs: dict[str, Ref] = {}
        self.dropped: set[tuple[str, str, int]] = set()

    def _drop(self, rollout_id: str) -> None:
        ref = self.refs[rollout_id]
        if ref.on_instance:
            self.dropped.add((ref.instance, rollout_id, ref.attempt))

    def _apply(self, action: str, rollout_id: str, data: st.DataObject) -> None:
        """Call ``action`` on both; an illegal call must raise and change nothing."""
        ref = self.refs.get(rollout_id)
        legal = ref is not None and ref.status in ALLOWED[action]
        keys = data.draw(st.sets(st.sampled_from(KEYS), max_size=2))
        instance = data.draw(st.none() | st.sampled_from(INSTANCES))
        calls: dict[str, Callable[[], object]] = {
            "dispatch": lambda: self.ledger.dispatch(live_cut(), rollout_id),
            "add_staging_keys": lambda: self.ledger.add_staging_keys(live_cut(), rollout_id, keys),
            "seal": lambda: self.ledger.seal(live_cut(), rollout_id),
            "fail": lambda: self.ledger.fail(live_cut(), rollout_id),
            "abandon": lambda: self.ledger.abandon(live_cut(), rollout_id),
            "mint_next_attempt": lambda: self.ledger.mint_next_attempt(
                live_cut(), rollout_id, instance_id=instance
            ),
            "restart_from_task": lambda: self.ledger.restart_from_task(
                live_cut(), rollout_id, instance_id=instance
            ),
        }
        if not legal:
            before = self.ledger.to_bytes()
            with pytest.raises(LedgerError):
                calls[action]()
            assert self.ledger.to_bytes() == before
            return
        assert ref is not None
        calls[action]()
        if action == "dispatch":
            ref.status, ref.restored = "dispatched", False
        elif action == "add_staging_keys":
            ref.keys |= keys
        elif action == "seal":
            ref.status = "sealed"
        elif action in {"fail", "abandon"}:
            self._drop(rollout_id)
            ref.status = "failed" if action == "fail" else "abandoned"
            ref.restored = False
        else:
            self._drop(rollout_id)
            self.refs[rollout_id] = Ref(ref.attempt + 1, instance or ref.instance, "reserved")

    def _reserve(self, rollout_id: str, instance: str) -> None:
        if rollout_id in self.refs:
            before = self.ledger.to_bytes()
            with pytest.raises(LedgerError):
                self.ledger.reserve(live_cut(), rollout_id, instance)
            assert self.ledger.to_bytes() == before
            return
        self.ledger.reserve(live_cut(), rollout_id, instance)
        self.refs[rollout_id] = Ref(0, instance, "reserved")

    @initialize(data=st.data())
    def populate(self, data: st.DataObject) -> None:
        # Start from a varied ledger so short runs reach restores of every status.
        paths = {
            "reserved": ("add_staging_keys",),
            "dispatched": ("dispatch", "add_staging_keys"),
            "sealed": ("dispatch", "add_staging_keys", "seal"),
            "failed": ("dispatch", "add_staging_keys", "fail"),
        }
        for rollout_id in data.draw(st.sets(st.sampled_from(ROLLOUTS), min_size=2)):
            self._reserve(rollout_id, data.draw(st.sampled_from(INSTANCES)))
            for action in paths[data.draw(st.sampled_from(sorted(paths)))]:
                self._apply(action, rollout_id, data)

    @rule(action=st.sampled_from((*ACTIONS, "reserve")), data=st.data())
    def legal_call(self, action: str, data: st.DataObject) -> None:
        if action == "reserve":
            free = [r for r in ROLLOUTS if r not in self.refs]
            if free:
                self._reserve(
                    data.draw(st.sampled_from(free)), data.draw(st.sampled_from(INSTANCES))
                )
            return
        candidates = sorted(r for r, ref in self.refs.items() if ref.status in ALLOWED[action])
        if candidates:
            self._apply(action, data.draw(st.sampled_from(candidates)), data)

    @rule(
        action=st.sampled_from((*ACTIONS, "reserve", "expired cut")),
        rollout_id=st.sampled_from(ROLLOUTS),
        data=st.data(),
    )
    def any_call(self, action: str, rollout_id: str, data: st.DataObject) -> None:
        if action == "reserve":
            self._reserve(rollout_id, data.draw(st.sampled_from(INSTANCES)))
        elif action == "expired cut":
            before = self.ledger.to_bytes()
            with pytest.raises(CutExpired):
                self.ledger.dispatch(dead_cut(), rollout_id)
            assert self.ledger.to_bytes() == before
        else:
            self._apply(action, rollout_id, data)

    @rule(instance=st.sampled_from(INSTANCES), data=st.data())
    def retire(self, instance: str, data: st.DataObject) -> None:
        held = sorted(t for t in self.dropped if t[0] == instance)
        chosen = data.draw(st.sets(st.sampled_from(held))) if held else set()
        self.ledger.retired(instance, tuple(Ep(r, a) for _, r, a in chosen))
        self.dropped -= chosen

    @rule()
    def forget(self) -> None:
        pending = {rollout_id for _, rollout_id, _ in self.dropped}
        expected = sorted(
            r for r, ref in self.refs.items() if ref.status in {"sealed", "abandoned"}
        )
        expected = [r for r in expected if r not in pending]
        assert list(self.ledger.forgettable()) == expected
        self.ledger.forgotten(live_cut(), expected)
        for rollout_id in expected:
            del self.refs[rollout_id]

    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        holders = sorted(r for r, ref in self.refs.items() if ref.on_instance)
        chosen = data.draw(st.sets(st.sampled_from(holders))) if holders else set()
        triples = {(self.refs[r].instance, r, self.refs[r].attempt) for r in chosen}
        restored_keys = data.draw(st.sets(st.sampled_from(KEYS)))
        if self.refs and data.draw(st.booleans()):
            # A triple naming an attempt the ledger never had: refused whole.
            victim = data.draw(st.sampled_from(sorted(self.refs)))
            bad = (self.refs[victim].instance, victim, self.refs[victim].attempt + 5)
            before = self.ledger.to_bytes()
            with pytest.raises(RestoreMismatch):
                self.ledger.prepare_for_restart(
                    live_cut(), RestoredEnvironmentRollouts(frozenset(triples | {bad}))
                )
            assert self.ledger.to_bytes() == before
            return
        plan = self.ledger.prepare_for_restart(
            live_cut(), RestoredEnvironmentRollouts(frozenset(triples), frozenset(restored_keys))
        )
        abandoned: set[str] = set()
        for rollout_id, ref in self.refs.items():
            if rollout_id in chosen:
                ref.attempt, ref.status, ref.restored = ref.attempt + 1, "reserved", True
            elif ref.status == "reserved" and not ref.restored:
                continue  # never sent: it just waits to be sent
            elif ref.status in {"reserved", "dispatched", "failed"}:
                self._drop(rollout_id)
                ref.status, ref.restored = "abandoned", False
                abandoned.add(rollout_id)
        assert {entry.rollout_id for entry in plan.continued} == chosen
        assert {entry.rollout_id for entry in plan.abandoned} == abandoned
        keep = set(restored_keys)
        for ref in self.refs.values():
            if ref.status in {"reserved", "dispatched", "sealed"}:
                keep |= ref.keys
        known = {key for ref in self.refs.values() for key in ref.keys}
        assert plan.keep_staging_keys == keep
        assert plan.clear_staging_keys == known - keep
        order = self.ledger.redispatch_order()
        restored_first = [entry.restored for entry in order]
        assert restored_first == sorted(restored_first, reverse=True)

    @rule()
    def save_and_load(self) -> None:
        data = self.ledger.to_bytes()
        self.ledger = RecoveryLedger.from_bytes(data)
        assert self.ledger.to_bytes() == data

    @invariant()
    def matches_the_reference(self) -> None:
        entries = {entry.rollout_id: entry for entry in self.ledger.entries()}
        assert set(entries) == set(self.refs)
        for rollout_id, ref in self.refs.items():
            entry = entries[rollout_id]
            assert (entry.attempt, entry.instance_id, entry.status.value, entry.restored) == (
                ref.attempt,
                ref.instance,
                ref.status,
                ref.restored,
            )
            assert set(entry.staging_keys) == ref.keys
        for instance in INSTANCES:
            expected = sorted(Ep(r, a) for i, r, a in self.dropped if i == instance)
            assert list(self.ledger.dropped_attempts(instance)) == expected

    @invariant()
    def one_current_attempt_per_rollout(self) -> None:
        seen: dict[str, Ep] = {}
        for instance in INSTANCES:
            for episode in self.ledger.inventory(instance):
                assert episode.rollout_id not in seen, "a rollout is live twice"
                seen[episode.rollout_id] = episode
                entry = self.ledger.entry(episode.rollout_id)
                assert (entry.attempt, entry.instance_id) == (episode.attempt, instance)
        for instance in INSTANCES:
            for episode in self.ledger.dropped_attempts(instance):
                assert seen.get(episode.rollout_id) != episode, "a dropped attempt is live"
                if episode.rollout_id in self.ledger:
                    assert episode.attempt <= self.ledger.entry(episode.rollout_id).attempt


LedgerMachine.TestCase.settings = settings(
    max_examples=examples(100), stateful_step_count=50, deadline=None
)
TestLedgerMachine = LedgerMachine.TestCase
