"""The package as a user installs it: typed, versioned, importable without its extras."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import envckpt

from helpers.core_only import BLOCK_EXTRAS

REPO = Path(__file__).resolve().parents[1]


def test_version_and_public_names() -> None:
    """__version__ comes from the installed metadata; every __all__ name resolves."""
    assert envckpt.__version__ and envckpt.__version__ != "0+unknown"
    for name in envckpt.__all__:
        assert getattr(envckpt, name) is not None, name


def test_public_names_are_listed_resolved_lazily_and_seen_by_type_checkers() -> None:
    """Every ``__all__`` name is in ``dir(envckpt)``, has a home module (``_EXPORTS``) that
    the TYPE_CHECKING imports name too, and an unknown name is an AttributeError."""
    init = Path(envckpt.__file__)
    typed: dict[str, str] = {}
    for node in ast.walk(ast.parse(init.read_text())):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module != "typing":
                    typed.update({alias.name: str(statement.module) for alias in statement.names})
    assert typed == envckpt._EXPORTS
    assert set(envckpt.__all__) == {*typed, "MissingExtra", "__version__"}
    assert set(envckpt.__all__) <= set(dir(envckpt))
    with pytest.raises(AttributeError, match="no_such_name"):
        envckpt.no_such_name  # noqa: B018


HEAVY = ("fastapi", "pydantic", "transitions", "ray", "aiohttp", "httpx", "structlog", "orjson")


def _heavy_imports(statement: str) -> list[str]:
    """The heavy third-party packages ``statement`` imports, in a fresh interpreter."""
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = json.loads(done.stdout)
    return sorted({name.split(".")[0] for name in loaded} & set(HEAVY))


def test_importing_a_leaf_module_imports_no_heavy_dependency() -> None:
    """``import envckpt.ids`` (and ``import envckpt``) load none of fastapi, pydantic,
    transitions, ray, aiohttp, httpx, structlog or orjson; the check sees them when a
    module that needs them is imported."""
    assert _heavy_imports("import envckpt.ids") == []
    assert _heavy_imports("import envckpt") == []
    assert _heavy_imports("import envckpt; envckpt.RolloutSnapshotter") != []
    assert {"transitions", "structlog"} <= set(_heavy_imports("import envckpt.machines.binding"))


def test_the_package_ships_its_typing_marker() -> None:
    """py.typed is in the package, so type checkers read envckpt's annotations."""
    assert (Path(envckpt.__file__).parent / "py.typed").is_file()


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


def _outside_the_checkout(tmp_path: Path) -> dict[str, str]:
    """An environment for a subprocess run as a user would: no PYTHONPATH, no MYPYPATH."""
    assert not tmp_path.resolve().is_relative_to(REPO.resolve())
    return {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "MYPYPATH", "PYTHONSAFEPATH")
    }


def _strict_mypy(script: Path) -> subprocess.CompletedProcess[str]:
    """``mypy --strict script`` run in the script's directory, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", "cache", script.name],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=script.parent,
        env=_outside_the_checkout(script.parent),
    )


def test_a_type_checker_outside_the_checkout_sees_the_installed_package(tmp_path: Path) -> None:
    """mypy --strict of a script in a directory outside the checkout finds envckpt as
    installed (setuptools' strict editable finder is invisible to it: import-not-found),
    and so catches a wrong use of it."""
    script = tmp_path / "user.py"
    script.write_text(
        "from envckpt.ids import mint_checkpoint_id\n"
        "from envckpt.episodes import EnvironmentEpisode\n\n"
        "def key(episode: EnvironmentEpisode) -> str:\n"
        "    return episode.capture_key + mint_checkpoint_id('h')\n"
    )
    done = _strict_mypy(script)
    assert done.returncode == 0, done.stdout + done.stderr
    bad = script.with_name("bad.py")
    bad.write_text(
        "from envckpt.ids import mint_checkpoint_id\n\nnumber: int = mint_checkpoint_id('h')\n"
    )
    done = _strict_mypy(bad)
    assert done.returncode == 1 and "Incompatible types in assignment" in done.stdout


def _where_envckpt_resolves(cwd: Path, env: dict[str, str]) -> str:
    code = "import envckpt; print(envckpt.__file__, envckpt.GymEnvironmentCheckpoint.__name__)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=cwd, env=env
    )
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


def test_the_installed_package_wins_over_a_directory_named_envckpt(tmp_path: Path) -> None:
    """Run from the folder holding a clone named ``envckpt`` (a directory without
    ``__init__.py``), ``import envckpt`` is the installed package, the same one as from
    anywhere else, not an empty namespace package made of the clone."""
    clone = tmp_path / "parent" / "envckpt"
    (clone / "docs").mkdir(parents=True)
    (clone / "README.md").write_text("a clone of envckpt\n")
    env = _outside_the_checkout(tmp_path)
    elsewhere = _where_envckpt_resolves(tmp_path, env)
    assert elsewhere.endswith(" GymEnvironmentCheckpoint"), elsewhere
    assert _where_envckpt_resolves(clone.parent, env) == elsewhere
