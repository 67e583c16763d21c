"""The package as a user installs it: typed, versioned, importable without its extras."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import envckpt

REPO = Path(__file__).resolve().parents[1]


def test_version_and_public_names() -> None:
    """__version__ comes from the installed metadata; every __all__ name resolves."""
    assert envckpt.__version__ and envckpt.__version__ != "0+unknown"
    for name in envckpt.__all__:
        assert getattr(envckpt, name) is not None, name


def test_the_package_ships_its_typing_marker() -> None:
    """py.typed is in the package, so type checkers read envckpt's annotations."""
    assert (Path(envckpt.__file__).parent / "py.typed").is_file()


BLOCK_EXTRAS = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"fastapi", "uvicorn", "httpx", "aiohttp", "starlette", "ray"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
"""


def test_a_core_only_install_imports_and_names_the_missing_extra() -> None:
    """Without the http extra, import envckpt works, HttpTransport (core) is there, and
    mount_participant says what to install."""
    code = BLOCK_EXTRAS + textwrap.dedent(
        """
        import envckpt
        from envckpt import MissingExtra
        print("transport:", envckpt.HttpTransport.__name__)
        try:
            envckpt.mount_participant
        except MissingExtra as error:
            print("extra:", error.extra)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split("\n")[:2] == ["transport: HttpTransport", "extra: http"]


@pytest.mark.slow
def test_a_downstream_strict_mypy_accepts_import_envckpt(tmp_path: Path) -> None:
    """A wheel of envckpt, installed as a user would, type-checks under mypy --strict."""
    # Built from a clean copy: a build/ directory left in the checkout would
    # carry stale files into the wheel.
    source = tmp_path / "source"
    shutil.copytree(REPO / "envckpt", source / "envckpt", ignore=shutil.ignore_patterns("*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(source)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    [wheel] = tmp_path.glob("envckpt-*.whl")
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), wheel],
        check=True,
        timeout=300,
        capture_output=True,
    )
    user = tmp_path / "user.py"
    user.write_text(
        textwrap.dedent(
            """
            import envckpt
            from envckpt import EnvironmentEpisode, GymEnvironmentCheckpoint, RolloutSnapshotter

            def next_key(episode: EnvironmentEpisode) -> str:
                return episode.next_attempt().capture_key

            snapshotter: type[RolloutSnapshotter] = envckpt.RolloutSnapshotter
            facade: type[GymEnvironmentCheckpoint] = envckpt.GymEnvironmentCheckpoint
            version: str = envckpt.__version__

            def newest_step(root: str) -> int | None:
                latest = envckpt.SnapshotCatalog(root).latest()
                return None if latest is None else latest.step

            def keep(path: str) -> int:
                return envckpt.load_config(path).keep_latest_k

            def seeds_way(client: object, token: str) -> envckpt.GymCheckpointAdapter:
                instance = envckpt.GymCheckpointInstance("shard", 0)
                return envckpt.GymCheckpointAdapter(
                    instance=instance, client=client, auth_token=token
                )
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(user)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
