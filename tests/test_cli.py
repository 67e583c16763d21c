"""The envckpt console script: statecharts and demo subcommands."""

from __future__ import annotations

import sys
import types
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from envckpt import statecharts
from envckpt.cli import main


def test_console_script_points_at_main() -> None:
    """The installed `envckpt` script runs envckpt.cli:main."""
    (script,) = entry_points(group="console_scripts", name="envckpt")
    assert script.value == "envckpt.cli:main"


def test_statecharts_writes_into_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`envckpt statecharts --dir D` writes every generated file into D."""
    target = tmp_path / "charts"
    assert main(["statecharts", "--dir", str(target)]) == 0
    assert {path.name for path in target.iterdir()} == set(statecharts.render_all())
    assert statecharts.check(target) == []
    assert f"updated {target / 'README.md'}" in capsys.readouterr().out


def test_statecharts_again_reports_up_to_date(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second run rewrites nothing and says the directory is up to date."""
    main(["statecharts", "--dir", str(tmp_path)])
    capsys.readouterr()
    assert main(["statecharts", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{tmp_path}: statecharts up to date\n"


def test_statecharts_default_dir_is_relative_to_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --dir the charts go to ./statecharts."""
    monkeypatch.chdir(tmp_path)
    assert main(["statecharts"]) == 0
    assert statecharts.check(tmp_path / "statecharts") == []


def test_statecharts_svg_without_graphviz_still_writes_charts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--svg without dot writes the charts, no SVG, and says why."""
    monkeypatch.setattr(statecharts.shutil, "which", lambda name: None)
    assert main(["statecharts", "--svg", "--dir", str(tmp_path)]) == 0
    assert statecharts.check(tmp_path) == []
    assert not list(tmp_path.glob("*.svg"))
    assert "dot not found" in capsys.readouterr().err


def test_overlay_needs_machine(tmp_path: Path) -> None:
    """--overlay without --machine is a usage error."""
    with pytest.raises(SystemExit) as caught:
        main(["statecharts", "--overlay", str(tmp_path / "run.jsonl")])
    assert caught.value.code == 2


def test_overlay_rejects_an_unknown_machine(tmp_path: Path) -> None:
    """--machine must name a table."""
    with pytest.raises(SystemExit) as caught:
        main(["statecharts", "--overlay", str(tmp_path / "x"), "--machine", "nope"])
    assert caught.value.code == 2


def test_overlay_of_a_missing_log_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log file that cannot be read exits 2 with the reason."""
    log = tmp_path / "missing.jsonl"
    assert main(["statecharts", "--overlay", str(log), "--machine", "snapshot_session"]) == 2
    assert "missing.jsonl" in capsys.readouterr().err


def test_check_cannot_be_combined_with_svg() -> None:
    """--check writes nothing, so it refuses --svg."""
    with pytest.raises(SystemExit) as caught:
        main(["statecharts", "--check", "--svg"])
    assert caught.value.code == 2


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    """Without a subcommand the usage goes to stderr and the exit code is 2."""
    assert main([]) == 2
    assert "statecharts" in capsys.readouterr().err


def test_demo_missing_module_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`envckpt demo` without envckpt.demo exits 2 and says the demo is missing."""
    monkeypatch.setitem(sys.modules, "envckpt.demo", None)
    assert main(["demo"]) == 2
    assert "envckpt.demo is missing" in capsys.readouterr().err


def test_demo_missing_dependency_names_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A demo whose own import fails exits 2 and names the missing module."""

    def fail(name: str) -> types.ModuleType:
        raise ModuleNotFoundError("No module named 'uvicorn'", name="uvicorn")

    monkeypatch.setattr("envckpt.cli.importlib.import_module", fail)
    assert main(["demo"]) == 2
    assert "'uvicorn'" in capsys.readouterr().err


def test_demo_forwards_every_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything after `demo` reaches envckpt.demo.main unchanged, and its code is returned."""
    seen: list[list[str]] = []

    def demo_main(argv: list[str]) -> int:
        seen.append(argv)
        return 3

    fake = types.ModuleType("envckpt.demo")
    fake.main = demo_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "envckpt.demo", fake)
    assert main(["demo", "--help", "--dir", "x", "statecharts"]) == 3
    assert seen == [["--help", "--dir", "x", "statecharts"]]
