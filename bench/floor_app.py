"""The honest floor's participant: minimal control endpoints, no envckpt code at all.

What any implementation of the protocol must do for one snapshot, done as
cheaply as this machine allows, on the same kind of FastAPI app and uvicorn
server as a Gym participant:

* prepare and resume: authenticate, parse the body, answer a fixed reply;
* commit: authenticate, parse the body, encode every in-scope state with the
  fastest encoder (orjson) and stream it to the file and the hash as it goes
  (``bench/streamed.py``; the records file is named by its sha256), and
  publish exactly as the protocol's store layout requires, with
  the same file operations and fsyncs as envckpt's store: each missing
  directory made and its parent synced, records written to a temp file,
  synced, renamed to ``records-<sha256>.jsonl``, directory synced, manifest
  written to a temp file, synced, linked, directory synced.

The records and the manifest are byte-identical to envckpt's for the same
states (the bench checks that once per run). Nothing here is reused from
envckpt: a floor built from the code it measures would flatter it.

    app = floor_app(server_name="policy", kind="model", token=token, states=states)
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response

from bench.states import commit_extras
from bench.streamed import write_streamed

PREFIX = "/ng-control/v1/checkpoint"
_JSON = "application/json"
_PREPARED = orjson.dumps(
    {
        "phase": "prepared",
        "report": {
            "ready": True,
            "blockers": [],
            "blocker_count": 0,
            "counts": {"live": 0, "in_flight": 0, "parked": 0, "restarts": 0},
            "restarts": [],
        },
    }
)
_RESUMED = orjson.dumps({"phase": "idle", "idempotent": False})
_UNAUTHORIZED = orjson.dumps({"error": {"code": "unauthorized", "detail": "bad token"}})


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_dirs(directory: Path) -> list[Path]:
    """Make the missing directories; the parents that got a new entry (synced later)."""
    missing: list[Path] = []
    probe = directory
    while not probe.is_dir():
        missing.append(probe)
        probe = probe.parent
    changed = []
    for new_dir in reversed(missing):
        try:
            new_dir.mkdir()
        except FileExistsError:
            continue
        changed.append(new_dir.parent)
    return changed


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "xb", buffering=0) as stream:
        view = memoryview(data)
        while view:
            view = view[stream.write(view) :]
        os.fsync(stream.fileno())


def publish(
    directory: Path,
    *,
    kind: str,
    instance: str,
    checkpoint_id: str,
    records: Iterable[bytes],
) -> dict[str, Any]:
    """Write one participant's records (streamed) and manifest durably; return the manifest."""
    new_dirs = _make_dirs(directory)
    tmp = directory / f".records-{uuid.uuid4().hex}.tmp"
    digest, count = write_streamed(tmp, records)
    records_name = f"records-{digest}.jsonl"
    os.replace(tmp, directory / records_name)
    # Gym's seven manifest fields, nothing else.
    manifest = {
        "schema_version": 1,
        "kind": kind,
        "instance": instance,
        "checkpoint_id": checkpoint_id,
        "records_file": records_name,
        "records_sha256": digest,
        "record_count": count,
    }
    body = orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    tmp = directory / f".manifest-{uuid.uuid4().hex}.tmp"
    _write_file(tmp, body)
    # Every entry made so far durable before the manifest is linked; after the
    # manifest's fsync, as the store does (a journal has committed them by then).
    for parent in new_dirs:
        _fsync_dir(parent)
    _fsync_dir(directory)
    try:
        os.link(tmp, directory / "manifest.json")
    finally:
        tmp.unlink()
    _fsync_dir(directory)
    return manifest


def floor_app(
    *, server_name: str, kind: str, token: str, states: dict[str, dict[str, Any]]
) -> FastAPI:
    """A FastAPI app answering prepare, commit and resume as cheaply as the protocol allows.

    ``states`` (rollout id -> state, attempt 0) is read at each commit, so
    the caller may replace its contents between snapshots.
    """
    app = FastAPI()
    bearer = f"Bearer {token}"

    def authorized(request: Request) -> bool:
        return request.headers.get("authorization") == bearer

    @app.get(f"{PREFIX}/status")
    async def status(request: Request) -> Response:
        if not authorized(request):
            return Response(_UNAUTHORIZED, status_code=401, media_type=_JSON)
        return Response(orjson.dumps({"kind": kind, "mode": "export_restore"}), media_type=_JSON)

    def fixed_reply(route: str, reply: bytes) -> None:
        """Prepare and resume: authenticate, parse the body, answer ``reply``."""

        @app.post(f"{PREFIX}/{route}", name=route)
        async def answer(request: Request) -> Response:
            if not authorized(request):
                return Response(_UNAUTHORIZED, status_code=401, media_type=_JSON)
            orjson.loads(await request.body())
            return Response(reply, media_type=_JSON)

    fixed_reply("prepare", _PREPARED)
    fixed_reply("resume", _RESUMED)

    @app.post(f"{PREFIX}/commit")
    async def commit(request: Request) -> Response:
        if not authorized(request):
            return Response(_UNAUTHORIZED, status_code=401, media_type=_JSON)
        body = orjson.loads(await request.body())
        checkpoint_id = body["checkpoint_id"]
        wanted = {item["rollout_id"] for item in body["episode_ids"] if item["attempt"] == 0}
        keys = sorted(key for key in states if key in wanted)
        chosen = [(key, states[key]) for key in keys]
        extras = commit_extras(kind, keys)

        def write() -> dict[str, Any]:
            # Gym's record envelope: the episode id, then the state's own fields.
            records = (
                orjson.dumps({"episode_id": {"rollout_id": key, "attempt": 0}, **s})
                for key, s in chosen
            )
            directory = Path(body["checkpoint_dir"]) / "gym" / kind / server_name
            return publish(
                directory,
                kind=kind,
                instance=server_name,
                checkpoint_id=checkpoint_id,
                records=records,
            )

        manifest = await asyncio.to_thread(write)
        reply = {
            "phase": "committed",
            "checkpoint_id": checkpoint_id,
            "manifest": manifest,
            "episode_ids": keys,
            **extras,
        }
        return Response(orjson.dumps(reply), media_type=_JSON)

    return app
