"""Tests for envckpt.demo.ray_nodes_args: what --nodes accepts beside it."""

from __future__ import annotations

import pytest

import envckpt.demo

from helpers.demo_cli import restored_logging


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--nodes", "3"], "pass --ray too"),
        (["--ray", "--nodes", "1"], "at least 2 nodes"),
        (["--ray", "--nodes", "3", "--kills", "3"], "1 to 2"),
        (["--ray", "--nodes", "3", "--preempt"], "does not take --preempt"),
    ],
)
def test_arguments_a_cluster_demo_cannot_run_are_refused(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No Ray, one node, as many kills as nodes, or a preemption: refused, exit 2."""
    with restored_logging(), pytest.raises(SystemExit) as caught:
        envckpt.demo.main(argv)
    assert caught.value.code == 2
    assert says in capsys.readouterr().err
