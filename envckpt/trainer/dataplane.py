"""The embedded data plane: staging rows in one SQLite database file (WAL mode).

Staging rows are the token rows a rollout's model calls write while it runs,
keyed by ``staging_key`` and tagged with the ``capture_key`` of the attempt
that wrote them. NeMo RL keeps them in TransferQueue; this is envckpt's
embedded default, used by the in-process trainer and the end-to-end tests.

    plane = SqliteDataPlane(run_dir / "dataplane.sqlite")
    async with barrier.mutation() as cut:
        plane.put(cut, "row-1", "task-7", payload)
    async with barrier.checkpoint() as cut:
        written = await plane.snapshot_to(cut, tmp / "dataplane.sqlite")
    ...
    # at startup: check the snapshot's copy, then install it (or start empty)
    staged = StagedDataPlane.stage(snapshot / "dataplane.sqlite", live_path)
    plane = staged.install()                   # or: SqliteDataPlane.fresh(live_path)
    async with barrier.mutation() as cut:
        plane.clear_orphans(cut, keep=plan.keep_staging_keys)

Every write takes a cut from the data-plane barrier and checks it first, so a
write cannot slip between a snapshot's ledger and its data-plane copy.

Threads: the object owns one connection, created with sqlite3's default
``check_same_thread``; use it only from the thread that made it (the event loop
thread). ``snapshot_to`` copies through its own short-lived connection in a
worker thread, so the event loop (lease renewals) keeps running during the copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from envckpt.closing import Closeable
from envckpt.errors import CorruptCheckpoint
from envckpt.fsutil import fsync_dir
from envckpt.interfaces import MutationCut

KIND = "envckpt.dataplane"
SCHEMA_VERSION = 1
# Below SQLite's smallest limit on bound parameters (999 before 3.32).
_CHUNK = 500

_SCHEMA = (
    "CREATE TABLE envckpt_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE staging_rows ("
    "staging_key TEXT PRIMARY KEY, capture_key TEXT NOT NULL, payload BLOB NOT NULL)",
    "CREATE INDEX staging_rows_capture_key ON staging_rows (capture_key)",
)
_COLUMNS = ("staging_key", "capture_key", "payload")


class DataPlaneCorrupt(CorruptCheckpoint):
    """A data-plane file is missing, damaged, foreign, or of another schema."""


@dataclass(frozen=True, slots=True)
class StagingRow:
    """One staging row."""

    staging_key: str
    capture_key: str
    payload: bytes


class SqliteDataPlane(Closeable):
    """Staging rows in a SQLite file in WAL mode; writes take a barrier cut."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open the data plane at ``path``, creating it if the file does not exist.

        Raises ``DataPlaneCorrupt`` if the file is not an envckpt data plane.
        """
        self._path = Path(path)
        if str(path) == ":memory:" or str(path).startswith("file:"):
            raise ValueError("the data plane lives in a real database file; pass a path")
        self._conn = sqlite3.connect(self._path, isolation_level=None)
        try:
            self._initialise()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise DataPlaneCorrupt(f"not an envckpt data plane: {exc}", path=str(path)) from exc
        except BaseException:
            self._conn.close()
            raise

    def _initialise(self) -> None:
        tables = {
            row[0]
            for row in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if not tables:
            with self._transaction():
                for statement in _SCHEMA:
                    self._conn.execute(statement)
                self._conn.executemany(
                    "INSERT INTO envckpt_meta (key, value) VALUES (?, ?)",
                    [("kind", KIND), ("schema_version", str(SCHEMA_VERSION))],
                )
        else:
            _check_schema(self._conn, str(self._path))
        mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode != "wal":
            raise DataPlaneCorrupt(
                f"cannot switch to WAL mode (got {mode!r})", path=str(self._path)
            )
        # NORMAL is durable enough: recovery restores from the fsynced snapshot
        # copy, never from the live file, and WAL keeps the live file consistent.
        self._conn.execute("PRAGMA synchronous=NORMAL")

    @property
    def path(self) -> Path:
        return self._path

    def journal_mode(self) -> str:
        """The connection's journal mode (``"wal"``)."""
        return str(self._conn.execute("PRAGMA journal_mode").fetchone()[0])

    def close(self) -> None:
        self._conn.close()

    # ---- reads -------------------------------------------------------------

    def keys(self) -> frozenset[str]:
        """Every staging key present."""
        return frozenset(
            row[0] for row in self._conn.execute("SELECT staging_key FROM staging_rows")
        )

    def get(self, key: str) -> StagingRow | None:
        """The row stored under ``key``, or None."""
        row = self._conn.execute(
            "SELECT staging_key, capture_key, payload FROM staging_rows WHERE staging_key = ?",
            (key,),
        ).fetchone()
        if row is None:
            return None
        return StagingRow(row[0], row[1], bytes(row[2]))

    def missing_keys(self, keys: Iterable[str]) -> frozenset[str]:
        """The keys of ``keys`` that have no row (empty: all present)."""
        return _missing_keys(self._conn, keys)

    # ---- writes (each takes a cut) -------------------------------------------

    def put(self, cut: MutationCut, key: str, capture_key: str, payload: bytes) -> None:
        """Store (or replace) the row ``key``."""
        cut.require_live()
        if not isinstance(key, str) or not key:
            raise ValueError("staging key must be a non-empty string")
        if not isinstance(capture_key, str) or not capture_key:
            raise ValueError("capture key must be a non-empty string")
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise ValueError(f"payload must be bytes, got {type(payload).__name__}")
        self._conn.execute(
            "INSERT INTO staging_rows (staging_key, capture_key, payload) VALUES (?, ?, ?) "
            "ON CONFLICT (staging_key) DO UPDATE SET "
            "capture_key = excluded.capture_key, payload = excluded.payload",
            (key, capture_key, bytes(payload)),
        )

    def delete(self, cut: MutationCut, keys: Iterable[str]) -> int:
        """Delete the rows ``keys`` (absent ones are ignored); return how many went."""
        cut.require_live()
        with self._transaction():
            cursor = self._conn.executemany(
                "DELETE FROM staging_rows WHERE staging_key = ?", ((key,) for key in set(keys))
            )
            return max(cursor.rowcount, 0)

    def clear_orphans(self, cut: MutationCut, keep: Iterable[str]) -> int:
        """Delete every row whose key is not in ``keep``; return how many went."""
        cut.require_live()
        with self._transaction():
            self._conn.execute("CREATE TEMP TABLE IF NOT EXISTS keep_keys (key TEXT PRIMARY KEY)")
            self._conn.execute("DELETE FROM temp.keep_keys")
            self._conn.executemany(
                "INSERT OR IGNORE INTO temp.keep_keys (key) VALUES (?)", ((key,) for key in keep)
            )
            cursor = self._conn.execute(
                "DELETE FROM staging_rows WHERE staging_key NOT IN (SELECT key FROM temp.keep_keys)"
            )
            deleted = max(cursor.rowcount, 0)
            self._conn.execute("DELETE FROM temp.keep_keys")
        return deleted

    # ---- snapshot and restore ----------------------------------------------

    async def snapshot_to(self, cut: MutationCut, path: str | os.PathLike[str]) -> int:
        """Copy the data plane to ``path`` under ``cut``; return the bytes written.

        The copy is one self-contained file (rollback journal, not WAL), written
        under a temporary name, fsynced, renamed into place, and its directory
        fsynced. The backup reads inside one read transaction, so the copy is
        consistent by itself; the cut makes it consistent with the ledger and
        the environment's manifest saved under the same cut.
        """
        cut.require_live()
        target = Path(path)
        tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex}")
        copy = asyncio.ensure_future(asyncio.to_thread(_backup_copy, self._path, tmp))
        try:
            written = await asyncio.shield(copy)
        except asyncio.CancelledError:
            # A worker thread cannot be stopped: remove its file once it is done.
            copy.add_done_callback(lambda _: tmp.unlink(missing_ok=True))
            raise
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        try:
            # The copy is only valid for the section that asked for it.
            cut.require_live()
            os.replace(tmp, target)
            fsync_dir(target.parent)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return written

    @classmethod
    def check_copy(cls, path: str | os.PathLike[str]) -> None:
        """Raise ``DataPlaneCorrupt`` unless ``path`` is an intact envckpt data plane.

        Opens the file, so call it on a copy you own (``restore_from`` does).
        """
        source = Path(path)
        if not source.is_file():
            raise DataPlaneCorrupt("data-plane file is missing", path=str(source))
        try:
            conn = sqlite3.connect(source, isolation_level=None)
        except sqlite3.Error as exc:
            raise DataPlaneCorrupt(f"cannot open data plane: {exc}", path=str(source)) from exc
        try:
            result = conn.execute("PRAGMA integrity_check").fetchall()
            if result != [("ok",)]:
                detail = "; ".join(str(row[0]) for row in result[:5])
                raise DataPlaneCorrupt(f"integrity check failed: {detail}", path=str(source))
            _check_schema(conn, str(source))
        except sqlite3.DatabaseError as exc:
            raise DataPlaneCorrupt(f"not a valid data plane: {exc}", path=str(source)) from exc
        finally:
            conn.close()

    @classmethod
    def restore_from(
        cls, source: str | os.PathLike[str], target_path: str | os.PathLike[str]
    ) -> SqliteDataPlane:
        """Install the snapshot copy ``source`` as the live data plane at ``target_path``.

        ``StagedDataPlane.stage`` then ``install``: a bad snapshot leaves the
        target untouched. Close any data plane open on ``target_path`` first.
        """
        return StagedDataPlane.stage(source, target_path).install()

    @classmethod
    def fresh(cls, path: str | os.PathLike[str]) -> SqliteDataPlane:
        """An empty data plane at ``path``: whatever a crashed run left there is deleted.

        With no snapshot to restore, no row of the old file is referenced.
        """
        target = Path(path)
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        return cls(target)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")


class StagedDataPlane:
    """A snapshot's data-plane copy, checked, waiting beside the live file to replace it.

    staged = StagedDataPlane.stage(snapshot / "dataplane.sqlite", live_path)
    staged.missing_keys(keys)          # read the copy before deciding
    plane = staged.install()           # or staged.discard()
    """

    def __init__(self, copy: Path, target: Path, source: Path) -> None:
        self.copy = copy
        self.target = target
        self.source = source

    @classmethod
    def stage(
        cls, source: str | os.PathLike[str], target_path: str | os.PathLike[str]
    ) -> StagedDataPlane:
        """Copy ``source`` beside ``target_path`` and check it; ``DataPlaneCorrupt`` if bad."""
        source_path = Path(source)
        target = Path(target_path)
        if not source_path.is_file():
            raise DataPlaneCorrupt("data-plane snapshot is missing", path=str(source_path))
        copy = target.with_name(f".{target.name}.restore-{uuid.uuid4().hex}")
        try:
            shutil.copyfile(source_path, copy)
            try:
                SqliteDataPlane.check_copy(copy)
            except DataPlaneCorrupt as exc:
                raise DataPlaneCorrupt(exc.message, path=str(source_path)) from exc
            _fsync_file(copy)
        except BaseException:
            copy.unlink(missing_ok=True)
            raise
        return cls(copy, target, source_path)

    def missing_keys(self, keys: Iterable[str]) -> frozenset[str]:
        """The keys of ``keys`` that have no row in the copy (read-only)."""
        conn = sqlite3.connect(f"file:{self.copy}?mode=ro", uri=True)
        try:
            return _missing_keys(conn, keys)
        except sqlite3.DatabaseError as exc:
            raise DataPlaneCorrupt(f"unreadable data plane: {exc}", path=str(self.source)) from exc
        finally:
            conn.close()

    def install(self) -> SqliteDataPlane:
        """Replace the live file with the copy and open it.

        Its WAL files are removed first so they cannot be replayed onto the new file.
        """
        try:
            for suffix in ("-wal", "-shm", "-journal"):
                Path(f"{self.target}{suffix}").unlink(missing_ok=True)
            os.replace(self.copy, self.target)
            fsync_dir(self.target.parent)
        except BaseException:
            self.discard()
            raise
        return SqliteDataPlane(self.target)

    def discard(self) -> None:
        self.copy.unlink(missing_ok=True)


def _missing_keys(conn: sqlite3.Connection, keys: Iterable[str]) -> frozenset[str]:
    wanted = sorted(set(keys))
    present: set[str] = set()
    for start in range(0, len(wanted), _CHUNK):
        chunk = wanted[start : start + _CHUNK]
        marks = ", ".join("?" * len(chunk))
        present.update(
            row[0]
            for row in conn.execute(
                f"SELECT staging_key FROM staging_rows WHERE staging_key IN ({marks})", chunk
            )
        )
    return frozenset(wanted) - present


def _check_schema(conn: sqlite3.Connection, where: str) -> None:
    """Raise ``DataPlaneCorrupt`` unless ``conn`` holds an envckpt data plane of this schema."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "envckpt_meta" not in tables:
        raise DataPlaneCorrupt("foreign database: no envckpt_meta table", path=where)
    meta = dict(conn.execute("SELECT key, value FROM envckpt_meta").fetchall())
    if meta.get("kind") != KIND:
        raise DataPlaneCorrupt(f"foreign database kind {meta.get('kind')!r}", path=where)
    if meta.get("schema_version") != str(SCHEMA_VERSION):
        raise DataPlaneCorrupt(
            f"data-plane schema {meta.get('schema_version')!r}, expected {SCHEMA_VERSION}",
            path=where,
        )
    if "staging_rows" not in tables:
        raise DataPlaneCorrupt("no staging_rows table", path=where)
    columns = tuple(row[1] for row in conn.execute("PRAGMA table_info(staging_rows)"))
    if columns != _COLUMNS:
        raise DataPlaneCorrupt(f"staging_rows has columns {columns}", path=where)


def _backup_copy(source: Path, dest: Path) -> int:
    """Copy ``source`` into the new file ``dest`` with the backup API; fsync; return its size."""
    src = sqlite3.connect(source)
    try:
        dst = sqlite3.connect(dest)
        try:
            # pages=-1: the whole database in one step, inside one read transaction.
            src.backup(dst)
            # The backup carries the WAL flag over; the copy must be one file.
            dst.execute("PRAGMA journal_mode=DELETE")
        finally:
            dst.close()
    finally:
        src.close()
    _fsync_file(dest)
    return dest.stat().st_size


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
