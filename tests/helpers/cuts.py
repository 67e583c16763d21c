"""Mutation cuts for tests that call the ledger and data plane without a barrier.

plane.put(live_cut(), "k1", "task-1", b"x")       # as inside a mutation section
with pytest.raises(CutExpired): ledger.reserve(dead_cut(), "r1", "i0")
"""

from __future__ import annotations

from envckpt.trainer.barrier import Cut, SectionKind


def live_cut() -> Cut:
    """A mutation cut that is still live."""
    return Cut(SectionKind.MUTATION)


def dead_cut() -> Cut:
    """A mutation cut whose section has ended."""
    cut = Cut(SectionKind.MUTATION)
    cut._expire()
    return cut
