"""Tests of naming what holds a TCP port, from /proc."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from envckpt.nemo_gym.port_holders import PortHolder, describe, listening_inodes, port_holders


def test_a_listening_socket_is_found_with_its_process() -> None:
    """This process's own listening socket: the inode, this pid, its command line."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        holders = port_holders(port)
    assert [h.pid for h in holders] == [os.getpid()]
    assert holders[0].inode in listening_inodes(port) or holders[0].inode > 0
    assert "python" in holders[0].command and "\n" not in holders[0].command
    assert describe(port, holders).startswith(f"port {port} is held by pid {os.getpid()} (")


def test_a_free_port_has_no_holder() -> None:
    """Nothing listens on a port just released: nothing is reported."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert port_holders(port) == [] and describe(port, []) == f"port {port} is in use"


def test_only_listening_sockets_on_that_port_count(tmp_path: Path) -> None:
    """A fake /proc: established sockets and other ports are ignored; an owner not visible
    is reported without a pid."""
    net = tmp_path / "net"
    net.mkdir()
    header = (
        "sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode"
    )
    tail = "00000000:00000000 00:00000000 00000000 1000 0"
    rows = [
        f"0: 0100007F:1F90 00000000:0000 0A {tail} 111 1",  # listening on 8080
        f"1: 0100007F:1F90 0100007F:C350 01 {tail} 222 1",  # an established connection
        f"2: 0100007F:1F91 00000000:0000 0A {tail} 333 1",  # listening on 8081
    ]
    (net / "tcp").write_text("\n".join([header, *rows]) + "\n")
    assert listening_inodes(0x1F90, proc=tmp_path) == {111}
    assert port_holders(0x1F90, proc=tmp_path) == [PortHolder(111)]
    assert "cannot see" in describe(0x1F90, [PortHolder(111)])
