"""Who holds a TCP port: the listening socket in ``/proc/net/tcp*``, its owner in ``/proc/*/fd``.

A port the config names must be free when the launcher starts the server
that binds it; when it is not, the launch names the port and, where this
user can see it, the process holding it (a server an earlier, killed job
left behind is the usual one)::

    holders = port_holders(8123)        # [] when nothing listens on it
    holders[0].pid, holders[0].command  # 4242, "python -m envckpt.nemo_gym.serve"
    describe(8123, holders)             # "port 8123 is held by pid 4242 (python -m ...)"

Only Linux has ``/proc``; elsewhere nothing is ever found. A socket whose
owner this user cannot read (another user's process) is reported without a
pid.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column
MAX_COMMAND = 160


@dataclass(frozen=True, slots=True)
class PortHolder:
    """A listening socket on the port: its inode, and its process when visible."""

    inode: int
    pid: int | None = None
    command: str = ""

    def describe(self) -> str:
        if self.pid is None:
            return "a process this user cannot see"
        return f"pid {self.pid} ({self.command})" if self.command else f"pid {self.pid}"


def listening_inodes(port: int, *, proc: Path = PROC) -> set[int]:
    """Inodes of the sockets listening on ``port``, any local address, IPv4 or IPv6."""
    inodes: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            _, _, hex_port = fields[1].rpartition(":")
            try:
                if int(hex_port, 16) == port:
                    inodes.add(int(fields[9]))
            except ValueError:
                continue
    return inodes


def port_holders(port: int, *, proc: Path = PROC) -> list[PortHolder]:
    """Every listening socket on ``port`` with the process holding it, where readable."""
    inodes = listening_inodes(port, proc=proc)
    if not inodes:
        return []
    found: dict[int, PortHolder] = {}
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    try:
        pids = [entry.name for entry in os.scandir(proc) if entry.name.isdigit()]
    except OSError:
        pids = []
    for pid in pids:
        try:
            descriptors = os.scandir(proc / pid / "fd")
        except OSError:
            continue  # gone, or another user's
        with descriptors:
            for descriptor in descriptors:
                try:
                    inode = wanted.get(os.readlink(descriptor.path))
                except OSError:
                    continue
                if inode is not None and inode not in found:
                    found[inode] = PortHolder(inode, int(pid), _command(proc / pid))
    return [found.get(inode, PortHolder(inode)) for inode in sorted(inodes)]


def describe(port: int, holders: list[PortHolder]) -> str:
    """One line naming the port and what holds it."""
    if not holders:
        return f"port {port} is in use"
    return f"port {port} is held by " + ", ".join(h.describe() for h in holders)


def _command(directory: Path) -> str:
    try:
        raw = (directory / "cmdline").read_bytes()
    except OSError:
        return ""
    text = " ".join(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)
    text = " ".join(text.split())  # one line, whatever the arguments hold
    return text if len(text) <= MAX_COMMAND else text[: MAX_COMMAND - 3] + "..."
