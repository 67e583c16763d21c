"""What ``envckpt demo --ray --nodes N`` accepts alongside it (``ray_cluster`` runs it)."""

from __future__ import annotations

import argparse


def check_nodes_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--nodes N: Ray actors on N local nodes, 1 to N-1 of them killed, nothing else."""
    if not args.ray:
        parser.error("--nodes runs on a Ray cluster: pass --ray too")
    for flag, given in (
        ("--in-process", args.in_process),
        ("--preempt", args.preempt),
        ("--nemo-gym", args.nemo_gym),
    ):
        if given:
            parser.error(f"--nodes does not take {flag}")
    if args.nodes < 2:
        parser.error("--nodes needs at least 2 nodes: the head, and one to lose")
    if args.kills is not None and not 1 <= args.kills < args.nodes:
        parser.error(f"--kills with --nodes {args.nodes} must be 1 to {args.nodes - 1}")
