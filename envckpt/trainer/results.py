"""Finished rollouts' results, saved with every snapshot as a sidecar.

The trainer keeps one result per sealed rollout. Results sealed after the
last snapshot are lost with a crash, exactly like the ledger's seals, and the
rollouts are finished again after the restore, so the final set holds each
rollout once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from envckpt.errors import CorruptCheckpoint
from envckpt.interfaces import MutationCut

RESULTS_SIDECAR = "results.json"
_KIND = "envckpt.results"


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
        body = {"kind": _KIND, "results": self._results}
        payload = json.dumps(body, sort_keys=True).encode()
        return json.dumps(
            {"sha256": hashlib.sha256(payload).hexdigest(), "body": body}, sort_keys=True
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes, *, path: str = "") -> ResultStore:
        try:
            document = json.loads(data)
            body = document["body"]
            payload = json.dumps(body, sort_keys=True).encode()
            if hashlib.sha256(payload).hexdigest() != document["sha256"]:
                raise ValueError("checksum mismatch")
            if body["kind"] != _KIND or not isinstance(body["results"], dict):
                raise ValueError("not a results file")
            return cls(body["results"])
        except (KeyError, TypeError, ValueError) as error:
            raise CorruptCheckpoint(f"invalid results sidecar: {error}", path=path) from error
