"""Shared pytest configuration: hypothesis profiles.

``CI`` is loaded when the ``CI`` environment variable is set: derandomized (a
failure reproduces on the next run), no per-example deadline (shared runners
stall), and the failing example's blob printed for ``@reproduce_failure``.
Modules keep their own ``max_examples`` and ``stateful_step_count``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "CI",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)

if os.environ.get("CI"):
    settings.load_profile("CI")
