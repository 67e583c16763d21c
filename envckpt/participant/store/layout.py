"""Where a participant's checkpoint lives on disk, and the names in it.

    <checkpoint_dir>/gym/<kind>/<instance>/records-<sha256>.jsonl
    <checkpoint_dir>/gym/<kind>/<instance>/manifest.json

Every path the store opens goes through these functions, so a name from a
manifest can never lead outside the participant's directory.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import NoReturn

from envckpt.errors import CorruptCheckpoint
from envckpt.ids import validate_path_component

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
GYM_DIR = "gym"
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
# A manifest holds seven fields (plus a caller's extras): a few hundred bytes.
# The caps leave extras room and refuse a hostile file before it is read.
DEFAULT_MAX_MANIFEST_BYTES = 1024 * 1024
DEFAULT_MAX_MANIFEST_VALUES = 10_000

STANDARD_FIELDS = frozenset(
    {
        "schema_version",
        "kind",
        "instance",
        "checkpoint_id",
        "records_file",
        "records_sha256",
        "record_count",
    }
)

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
RECORDS_NAME = re.compile(r"records-([0-9a-f]{64})\.jsonl")
StrPath = str | os.PathLike[str]


def records_file_name(sha256_hex: str) -> str:
    """The records file name for a digest: ``records-<sha256>.jsonl``."""
    return f"records-{sha256_hex}.jsonl"


def participant_dir(checkpoint_dir: StrPath, kind: str, instance: str) -> Path:
    """``<checkpoint_dir>/gym/<kind>/<instance>``, with kind and instance validated."""
    validate_path_component(kind, what="kind")
    validate_path_component(instance, what="instance")
    return Path(checkpoint_dir) / GYM_DIR / kind / instance


def temp_path(directory: Path, stem: str) -> Path:
    # Unique per writer, dot-prefixed so nothing mistakes it for a published file.
    return directory / f".{stem}-{os.getpid()}-{uuid.uuid4().hex}.tmp"


def refuse_published(manifest_path: Path) -> None:
    """Raise if the directory already has a manifest: a published directory never changes."""
    if os.path.lexists(manifest_path):
        raise CorruptCheckpoint(
            "checkpoint directory already published", path=str(manifest_path.parent)
        )


def checked_records_path(directory: Path, name: str, sha256_hex: str, where: str) -> Path:
    """``directory / name`` if ``name`` is the digest name and stays inside ``directory``."""
    if (
        name in {"", ".", ".."}
        or "/" in name
        or "\\" in name
        or "\x00" in name
        or os.path.isabs(name)
    ):
        raise CorruptCheckpoint(
            f"records_file {name!r} escapes the participant directory", path=where
        )
    if not RECORDS_NAME.fullmatch(name):
        raise CorruptCheckpoint(
            f"records_file {name!r} is not a records-<sha256>.jsonl name", path=where
        )
    if not SHA256_HEX.fullmatch(sha256_hex):
        raise CorruptCheckpoint(
            f"records_sha256 {sha256_hex!r} is not 64 lowercase hex", path=where
        )
    if name != records_file_name(sha256_hex):
        raise CorruptCheckpoint(
            f"records_file {name!r} does not match records_sha256 {sha256_hex!r}", path=where
        )
    # The name is plain, but the file could still be a symlink out of the directory.
    path = directory / name
    if not path.resolve().is_relative_to(directory.resolve()):
        raise CorruptCheckpoint(
            f"records_file {name!r} escapes the participant directory", path=where
        )
    return path


def reject_json_constant(name: str) -> NoReturn:
    """``parse_constant`` for readers: NaN and Infinity are not JSON."""
    raise ValueError(f"{name} is not valid JSON")
