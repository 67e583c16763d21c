"""Finished rollouts' results, saved with every snapshot as a sidecar.

The trainer keeps one result per sealed rollout. Results sealed after the
last snapshot are lost with a crash, exactly like the ledger's seals, and the
rollouts are finished again after the restore, so the final set holds each
rollout once. The sidecar is a checksummed JSON document (``envckpt.checksummed``).

    sidecars = {RESULTS_SIDECAR: results.to_bytes}       # saved under the snapshot's cut
    results = ResultStore.from_bytes(data, path=...)     # CorruptCheckpoint if damaged
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envckpt import checksummed
from envckpt.errors import CorruptCheckpoint
from envckpt.interfaces import MutationCut
from envckpt.machines.tables import LedgerStatus
from envckpt.trainer.ledger import RecoveryLedger

RESULTS_SIDECAR = "results.json"
KIND = "envckpt.results"
SCHEMA_VERSION = 1


class ResultStore:
    """rollout id -> the result of the attempt that finished it."""

    def __init__(self, results: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self._results: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (results or {}).items()}

    def __len__(self) -> int:
        return len(self._results)

    def __contains__(self, rollout_id: object) -> bool:
        return rollout_id in self._results

    def get(self, rollout_id: str) -> dict[str, Any] | None:
        return self._results.get(rollout_id)

    def items(self) -> list[tuple[str, dict[str, Any]]]:
        return sorted(self._results.items())

    def record(self, cut: MutationCut, rollout_id: str, result: Mapping[str, Any]) -> None:
        """Keep the result; a second result for one rollout is a bug."""
        cut.require_live()
        if rollout_id in self._results:
            raise ValueError(f"rollout {rollout_id!r} finished twice")
        self._results[rollout_id] = dict(result)

    def to_bytes(self, cut: MutationCut) -> bytes:
        cut.require_live()
        return checksummed.encode(
            kind=KIND, schema_version=SCHEMA_VERSION, body={"results": self._results}
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, path: str = "") -> ResultStore:
        """Parse ``to_bytes`` output; ``CorruptCheckpoint`` for anything else."""
        body = checksummed.decode(
            data, kind=KIND, schema_version=SCHEMA_VERSION, fields=("results",), path=path
        )
        results = body["results"]
        if not isinstance(results, dict) or not all(
            isinstance(rollout_id, str) and rollout_id and isinstance(result, dict)
            for rollout_id, result in results.items()
        ):
            raise CorruptCheckpoint(
                "invalid results sidecar: results must map rollout ids to objects", path=path
            )
        return cls(results)


def read_results_sidecar(data: bytes, *, path: str, ledger: RecoveryLedger) -> ResultStore:
    """The results sidecar of a snapshot, checked against the ledger saved with it.

    Both are saved under one cut, and a rollout is sealed in the same
    mutation that records its result: every sealed rollout has a result, and
    every result's rollout is sealed (or was forgotten by the ledger).
    """
    store = ResultStore.from_bytes(data, path=path)
    sealed = {e.rollout_id for e in ledger.entries() if e.status is LedgerStatus.SEALED}
    missing = sorted(sealed - set(store._results))
    unsealed = sorted(
        rollout_id
        for rollout_id in store._results
        if rollout_id in ledger and ledger.entry(rollout_id).status is not LedgerStatus.SEALED
    )
    if missing or unsealed:
        raise CorruptCheckpoint(
            f"results disagree with the ledger: sealed without a result {missing[:5]}, "
            f"a result for an unfinished rollout {unsealed[:5]}",
            path=path,
        )
    return store
