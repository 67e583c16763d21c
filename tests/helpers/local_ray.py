"""One quiet local Ray cluster for a test module: loopback only, two CPUs, no dashboard.

    @pytest.fixture(scope="module")
    def ray_cluster() -> Iterator[Any]:
        with local_ray("envckpt-tests") as ray:
            yield ray

Its workers find the tests directory on ``PYTHONPATH``, so actors may be
classes from ``helpers`` (``helpers.ray_hosts``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def local_ray(namespace: str) -> Iterator[Any]:
    """Start the cluster in ``namespace``, yield the ``ray`` module, and shut it down."""
    ray = pytest.importorskip("ray")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        path = [str(TESTS_DIR), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        patch.setenv("PYTHONPATH", os.pathsep.join(path))
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
            object_store_memory=80 * 1024 * 1024,
            namespace=namespace,
            _node_ip_address="127.0.0.1",
        )
        try:
            yield ray
        finally:
            ray.shutdown()
