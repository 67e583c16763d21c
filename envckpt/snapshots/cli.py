"""``envckpt snapshots``: list, show, verify, prune and delete a root's rollout snapshots.

    envckpt snapshots list ROOT [--refused] [--json]
    envckpt snapshots show ROOT ID [--json]          # ID: an id, "latest" or "step:N"
    envckpt snapshots verify ROOT [ID] [--json] [--progress auto|always|never]
    envckpt snapshots prune ROOT --keep K [--json]
    envckpt snapshots delete ROOT ID [--json]

ROOT is the snapshot root a trainer was given (``RolloutSnapshotter(root)``,
``envckpt demo --dir ROOT``): the directory that holds ``snapshots/``.
Everything is offline: no Gym server is contacted.

Exit codes: 0 done (``verify``: every snapshot passed); 1 ``verify`` found a
problem, the snapshot asked for does not exist, or ``delete`` refused an
entry envckpt did not publish; 2 bad arguments, or a ROOT that is no
snapshot root (not a directory, no ``snapshots/`` in it, or a ``snapshots``,
``.tmp``, ``.trash``, ``refused`` or ``.lock`` that is a symbolic link); 3
``prune``/``delete`` refused because a trainer holds the root's lock (they
change what a running trainer restores from, so they need the lock it holds).

``prune`` and ``delete`` remove only snapshots envckpt published (a
directory whose ``MANIFEST.json`` verifies and names it), never through a
link; every other entry of ``snapshots/`` is left and printed as ``left``
(``trainer.root_entries``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from envckpt.progress import BYTES, ProgressBar
from envckpt.snapshots import render
from envckpt.snapshots.details import describe
from envckpt.snapshots.verify import VerifyReport, verify_snapshot_dir
from envckpt.trainer.catalog import SnapshotCatalog, SnapshotEntry
from envckpt.trainer.job_errors import (
    SnapshotNotOwned,
    SnapshotRootLocked,
    SnapshotRootUnsafe,
    StartRefused,
)
from envckpt.trainer.layout import SNAPSHOTS_DIR
from envckpt.trainer.root_guard import RootLock

# ``verify --progress auto`` draws a bar for snapshots at least this large.
LARGE_SNAPSHOT_BYTES = 64 * 1024 * 1024
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_LOCKED = 3
_T = TypeVar("_T")


class CommandError(Exception):
    """A clear message and the exit code it ends with."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def add_parser(commands: Any) -> None:
    """The ``snapshots`` subcommand and its verbs, on the main parser's subparsers."""
    parser = commands.add_parser(
        "snapshots",
        help="list, show, verify, prune or delete rollout snapshots (offline)",
        description="List, show, verify, prune and delete the rollout snapshots under a root"
        " (offline: no Gym server is contacted).",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(name: str, text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = verbs.add_parser(name, help=text, description=text)
        sub.add_argument("root", type=Path, metavar="ROOT", help="the directory holding snapshots/")
        sub.add_argument("--json", action="store_true", help="print JSON instead of tables")
        return sub

    listing = verb("list", "one line per snapshot: id, step, created, size, instances, episodes")
    listing.add_argument("--refused", action="store_true", help="also list refused snapshots")
    verb(
        "show", "one snapshot: manifest, instances, participants, what a restore does"
    ).add_argument("id", metavar="ID", help='a snapshot id, "latest" or "step:N"')
    checking = verb("verify", "check every digest and every file's content; exit 1 if any fails")
    checking.add_argument("id", metavar="ID", nargs="?", help="one snapshot (default: every one)")
    checking.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto",
        help="progress bar while hashing (auto: snapshots of 64 MiB or more)",
    )
    pruning = verb("prune", "delete all but the newest K snapshots (through the trash)")
    pruning.add_argument("--keep", type=int, required=True, metavar="K", help="snapshots to keep")
    verb("delete", "delete one snapshot (through the trash)").add_argument(
        "id", metavar="ID", help="the snapshot id"
    )


def run(args: argparse.Namespace) -> int:
    """Run the verb; messages for the operator on stderr, results on stdout."""
    try:
        catalog = _catalog(args.root)
        handler: Callable[[SnapshotCatalog, argparse.Namespace], int] = _VERBS[args.verb]
        return handler(catalog, args)
    except CommandError as error:
        print(f"envckpt snapshots {args.verb}: {error}", file=sys.stderr)
        return error.code


def _catalog(root: Path) -> SnapshotCatalog:
    if not root.is_dir():
        raise CommandError(f"{root} is not a directory", EXIT_USAGE)
    snapshots = root / SNAPSHOTS_DIR
    if not snapshots.exists() and not snapshots.is_symlink():
        if root.name == SNAPSHOTS_DIR:
            raise CommandError(
                f"{root} looks like the snapshots/ directory itself; give the snapshot root "
                f"that holds it: {root.parent}",
                EXIT_USAGE,
            )
        raise CommandError(
            f"{root} is not a snapshot root: it holds no {SNAPSHOTS_DIR}/ directory (give the "
            "directory a trainer was given as its root)",
            EXIT_USAGE,
        )
    catalog = SnapshotCatalog(root)
    try:
        catalog.layout.check_safe()
    except SnapshotRootUnsafe as error:
        raise CommandError(str(error), EXIT_USAGE) from None
    if not snapshots.is_dir():
        raise CommandError(
            f"{snapshots} is not a directory: {root} is no snapshot root", EXIT_USAGE
        )
    return catalog


def _list(catalog: SnapshotCatalog, args: argparse.Namespace) -> int:
    entries = catalog.all()
    refused = catalog.refused() if args.refused else []
    foreign = catalog.foreign()
    if args.json:
        _print_json(
            {
                "root": str(catalog.root),
                "snapshots": [render.entry_json(entry) for entry in entries],
                "refused": [render.entry_json(entry) for entry in refused],
                "foreign": [render.foreign_json(entry) for entry in foreign],
            }
        )
        return 0
    console = render.make_console(sys.stdout)
    if not entries and not refused:
        console.print(f"no snapshots in {catalog.layout.snapshots}")
    else:
        console.print(render.list_table(entries + refused))
    if foreign:
        console.print(render.foreign_lines(foreign, root=catalog.root, verb="listed"))
    return 0


def _show(catalog: SnapshotCatalog, args: argparse.Namespace) -> int:
    details = describe(_find(catalog, args.id))
    if args.json:
        _print_json(render.details_json(details))
    else:
        render.make_console(sys.stdout).print(render.show_view(details))
    return 0


def _verify(catalog: SnapshotCatalog, args: argparse.Namespace) -> int:
    entries = [_find(catalog, args.id)] if args.id else catalog.all()
    reports = [_verify_one(entry, args.progress) for entry in entries]
    if args.json:
        _print_json(
            {
                "root": str(catalog.root),
                "passed": all(report.passed for report in reports),
                "snapshots": [render.report_json(report) for report in reports],
            }
        )
    else:
        render.make_console(sys.stdout).print(render.verify_view(reports))
    return 0 if all(report.passed for report in reports) else EXIT_FAILED


def _verify_one(entry: SnapshotEntry, progress: str) -> VerifyReport:
    large = entry.size >= LARGE_SNAPSHOT_BYTES
    if progress == "never" or (progress == "auto" and not large):
        return verify_snapshot_dir(entry.path)
    # A rich bar on a terminal, plain lines in a log (envckpt.progress).
    label = f"verifying {entry.checkpoint_id}"
    with ProgressBar(label, max(entry.size, 1), unit=BYTES) as bar:
        return verify_snapshot_dir(entry.path, on_bytes=bar.advance)


def _prune(catalog: SnapshotCatalog, args: argparse.Namespace) -> int:
    if args.keep < 1:
        raise CommandError(
            "--keep must be at least 1 (delete the last one with `delete`)", EXIT_USAGE
        )
    with _holding(catalog.root, "prune"):
        removal = _changing(lambda: catalog.layout.prune(args.keep))
        kept = [snapshot.name for snapshot in catalog.layout.scan().owned()]
    if args.json:
        _print_json(
            {
                "root": str(catalog.root),
                "removed": list(removal.removed),
                "kept": kept,
                "left": [render.foreign_json(entry) for entry in removal.left],
            }
        )
    else:
        for name in removal.removed:
            print(f"deleted {name}")
        if removal.left:
            lines = render.foreign_lines(removal.left, root=catalog.root, verb="left")
            render.make_console(sys.stdout).print(lines)
        print(
            f"kept {len(kept)} snapshot(s), deleted {len(removal.removed)}, "
            f"left {len(removal.left)} entr{'y' if len(removal.left) == 1 else 'ies'} "
            "envckpt did not make"
        )
    return 0


def _delete(catalog: SnapshotCatalog, args: argparse.Namespace) -> int:
    entry = _find(catalog, args.id, resolve=False)
    with _holding(catalog.root, "delete"):
        try:
            _changing(lambda: catalog.layout.delete(entry.checkpoint_id))
        except FileNotFoundError as error:  # deleted by someone else meanwhile
            raise CommandError(str(error), EXIT_FAILED) from None
        except SnapshotNotOwned as error:
            raise CommandError(str(error), EXIT_FAILED) from None
    if args.json:
        _print_json({"root": str(catalog.root), "deleted": entry.checkpoint_id})
    else:
        print(f"deleted {entry.checkpoint_id}")
    return 0


def _changing(change: Callable[[], _T]) -> _T:
    """Run ``change``; a directory of the root turned into a link meanwhile exits 2."""
    try:
        return change()
    except SnapshotRootUnsafe as error:
        raise CommandError(str(error), EXIT_USAGE) from None


def _find(catalog: SnapshotCatalog, name: str, *, resolve: bool = True) -> SnapshotEntry:
    """The snapshot ``name`` names: an id, or (``resolve``) "latest" or "step:N"."""
    if resolve and name == "latest":
        latest = catalog.latest()
        if latest is None:
            raise CommandError(f"no usable snapshot in {catalog.layout.snapshots}", EXIT_FAILED)
        return latest
    if resolve and name.startswith("step:"):
        try:
            return catalog.get(int(name.removeprefix("step:")))
        except ValueError:
            raise CommandError(f"{name!r}: the step must be an integer", EXIT_USAGE) from None
        except KeyError as error:
            raise CommandError(str(error.args[0]), EXIT_FAILED) from None
    try:
        return catalog.entry(name)
    except KeyError as error:
        raise CommandError(str(error.args[0]), EXIT_FAILED) from None


@contextmanager
def _holding(root: Path, verb: str) -> Iterator[None]:
    """The root's lock for the length of the change, or a clear refusal."""
    try:
        lock = RootLock.acquire(root)
    except SnapshotRootLocked as error:
        raise CommandError(
            f"refused: a trainer holds {root} (pid {error.pid} on {error.host} since "
            f"{error.since}); a running trainer restores and publishes here, so {verb} waits "
            "until it has stopped",
            EXIT_LOCKED,
        ) from None
    except StartRefused as error:
        raise CommandError(str(error), EXIT_LOCKED) from None
    try:
        yield
    finally:
        lock.release()


def _print_json(document: dict[str, Any]) -> None:
    print(json.dumps(document, indent=1, sort_keys=True))


_VERBS: dict[str, Callable[[SnapshotCatalog, argparse.Namespace], int]] = {
    "list": _list,
    "show": _show,
    "verify": _verify,
    "prune": _prune,
    "delete": _delete,
}
