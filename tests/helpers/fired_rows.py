"""The rows of one machine a test fired, read from structlog's captured transition events."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def fired(
    logs: Iterable[Mapping[str, object]], machine: str
) -> list[tuple[object, object, object]]:
    """``(source, trigger, dest)`` of each transition ``machine`` logged, in order."""
    return [(e["source"], e["trigger"], e["dest"]) for e in logs if e.get("machine") == machine]
