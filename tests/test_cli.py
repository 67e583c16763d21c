"""The envckpt console script: statecharts and demo subcommands."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from envckpt.cli import main
from envckpt.statecharts import embeds

from helpers.core_only import BLOCK_EXTRAS


def test_console_script_points_at_main() -> None:
    """The installed `envckpt` script runs envckpt.cli:main."""
    (script,) = entry_points(group="console_scripts", name="envckpt")
    assert script.value == "envckpt.cli:main"


def test_statecharts_writes_into_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`envckpt statecharts --dir D` writes every generated file into D."""
    target = tmp_path / "charts"
    assert main(["statecharts", "--dir", str(target), "--docs", str(tmp_path / "docs")]) == 0
    assert {path.name for path in target.iterdir()} == set(embeds.render_all())
    assert embeds.check(target) == []
    assert f"updated {target / 'README.md'}" in capsys.readouterr().out


def test_statecharts_again_reports_up_to_date(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second run rewrites nothing and says the directory is up to date."""
    main(["statecharts", "--dir", str(tmp_path), "--docs", str(tmp_path / "docs")])
    capsys.readouterr()
    assert main(["statecharts", "--dir", str(tmp_path), "--docs", str(tmp_path / "docs")]) == 0
    assert capsys.readouterr().out == f"{tmp_path}: statecharts up to date\n"


def test_statecharts_default_dir_is_relative_to_a_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In an envckpt checkout, without --dir the charts go to ./statecharts."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "envckpt"\n')
    monkeypatch.chdir(tmp_path)
    assert main(["statecharts"]) == 0
    assert embeds.check(tmp_path / "statecharts") == []
    (tmp_path / "pyproject.toml").unlink()
    assert main(["statecharts", "--check"]) == 0, "an existing statecharts/ marks a checkout"


def test_statecharts_outside_a_checkout_needs_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Elsewhere, without --dir, nothing is created: exit 2 and a message saying what to pass."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "someone-else"\n')
    monkeypatch.chdir(tmp_path)
    for args in (["statecharts"], ["statecharts", "--check"]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "is not an envckpt checkout" in err and "--dir DIR" in err
    assert not (tmp_path / "statecharts").exists()
    assert main(["statecharts", "--dir", "charts", "--docs", "docs"]) == 0
    assert embeds.check(tmp_path / "charts") == []


def test_statecharts_also_refills_the_docs(tmp_path: Path) -> None:
    """A stale chart region under --docs is refilled by a plain run and fails --check."""
    doc = tmp_path / "docs" / "engine.md"
    doc.parent.mkdir()
    doc.write_text("<!-- statechart:participant_phases -->\nold\n<!-- /statechart -->\n")
    charts = ["statecharts", "--dir", str(tmp_path / "sc"), "--docs", str(tmp_path / "docs")]
    main(charts)
    assert embeds.check_docs(tmp_path / "docs") == []
    doc.write_text("<!-- statechart:participant_phases -->\nold\n<!-- /statechart -->\n")
    assert main([*charts, "--check"]) == 1


def test_check_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--check` returns 0 when up to date and 1 on drift, and writes nothing."""
    charts = ["statecharts", "--dir", str(tmp_path), "--docs", str(tmp_path / "docs")]
    main(charts)
    assert main([*charts, "--check"]) == 0
    (tmp_path / "README.md").write_text("stale\n")
    capsys.readouterr()
    assert main([*charts, "--check"]) == 1
    assert f"{tmp_path / 'README.md'}: out of date" in capsys.readouterr().err
    assert (tmp_path / "README.md").read_text() == "stale\n"


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


def transition(machine: str, trigger: str, source: str, dest: str) -> str:
    fields = {"machine": machine, "instance_id": "m", "trigger": trigger}
    return json.dumps({"event": "transition", **fields, "source": source, "dest": dest}) + "\n"


def test_overlay_prints_the_chart_of_several_logs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--overlay LOG LOG --machine NAME` prints one overlay of both logs."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(transition("participant_phases", "prepare", "idle", "preparing"))
    second.write_text(transition("participant_phases", "prepare", "idle", "preparing"))
    args = ["statecharts", "--overlay", str(first), str(second), "--machine", "participant_phases"]
    assert main(args) == 0
    assert '    s_idle ==>|"prepare \u00d72"| s_preparing' in capsys.readouterr().out


def test_overlay_without_transitions_of_the_machine_fails_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log with no transition of the machine exits 1 and says there is nothing to draw."""
    log = tmp_path / "run.jsonl"
    log.write_text(json.dumps({"event": "started"}) + "\n")
    assert main(["statecharts", "--overlay", str(log), "--machine", "snapshot_session"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "nothing to draw: no transitions of snapshot_session were recorded" in captured.err
    assert str(log) in captured.err


def test_check_cannot_be_combined_with_render_or_overlay(tmp_path: Path) -> None:
    """--check writes nothing, so it refuses --render and --overlay."""
    for extra in (["--render", str(tmp_path)], ["--overlay", "x", "--machine", "snapshot_session"]):
        with pytest.raises(SystemExit) as caught:
            main(["statecharts", "--check", *extra])
        assert caught.value.code == 2


def test_svg_is_gone_in_favour_of_render(capsys: pytest.CaptureFixture[str]) -> None:
    """The Graphviz --svg option no longer exists: a usage error."""
    with pytest.raises(SystemExit) as caught:
        main(["statecharts", "--svg"])
    assert caught.value.code == 2
    assert "--svg" in capsys.readouterr().err


def test_render_without_the_renderer_exits_2_and_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--render DIR` where mermaid-cli is missing exits 2 naming the install step."""
    (tmp_path / "render.mjs").write_text("")
    monkeypatch.setenv("ENVCKPT_MERMAID_TOOL", str(tmp_path))
    assert main(["statecharts", "--render", str(tmp_path / "svg")]) == 2
    err = capsys.readouterr().err
    assert "cannot render: " in err and "make mermaid" in err
    assert not (tmp_path / "svg").exists()


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


STAND_IN_NODE = """\
import json, sys
from pathlib import Path
for job in json.loads(Path(sys.argv[2]).read_text()):
    Path(job["output"]).write_text('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 640 80"/>')
"""


@pytest.fixture
def stand_in_renderer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A renderer whose node is a Python stand-in writing an empty 640 px SVG per chart."""
    tool = tmp_path / "tool"
    (tool / "node_modules" / "@mermaid-js" / "mermaid-cli").mkdir(parents=True)
    (tool / "render.mjs").write_text("")
    node = tmp_path / "bin" / "node"
    node.parent.mkdir()
    node.write_text(f"#!{sys.executable}\n{STAND_IN_NODE}")
    node.chmod(0o755)
    monkeypatch.setenv("PATH", str(node.parent))
    monkeypatch.setenv("ENVCKPT_MERMAID_TOOL", str(tool))
    monkeypatch.setenv("ENVCKPT_CHROMIUM", "/bin/sh")


@pytest.mark.usefixtures("stand_in_renderer")
def test_render_writes_one_svg_per_machine_and_measures_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--render DIR` writes <machine>.svg for every machine and prints its measures."""
    out = tmp_path / "svg"
    assert main(["statecharts", "--render", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert lines[0] == (
        f"wrote {out / 'instance_lifecycle.svg'}: 640 px wide, 0 edges, 0 crossings,"
        " 0 overlapping labels, 0 labels on states"
    )
    assert sorted(path.name for path in out.iterdir()) == [
        "instance_lifecycle.svg",
        "participant_phases.svg",
        "rollout_ledger.svg",
        "snapshot_session.svg",
    ]


@pytest.mark.usefixtures("stand_in_renderer")
def test_overlay_with_render_writes_the_overlay_svg(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--overlay LOG --machine M --render DIR` writes DIR/M.overlay.svg, not the text."""
    log = tmp_path / "run.jsonl"
    log.write_text(transition("snapshot_session", "prepare", "opened", "prepared"))
    out = tmp_path / "svg"
    args = ["statecharts", "--overlay", str(log), "--machine", "snapshot_session"]
    assert main([*args, "--render", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out / 'snapshot_session.overlay.svg'}: ")
    assert [path.name for path in out.iterdir()] == ["snapshot_session.overlay.svg"]


RUN_CLI_CORE_ONLY = (
    BLOCK_EXTRAS
    + """
import runpy
sys.argv = ["envckpt", *sys.argv[1:]]
runpy.run_module("envckpt", run_name="__main__")
"""
)


def core_only(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``envckpt ARGS`` in a process where the optional extras cannot be imported."""
    return subprocess.run(
        [sys.executable, "-c", RUN_CLI_CORE_ONLY, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )


def test_demo_on_a_core_only_install_names_the_extra_to_install(tmp_path: Path) -> None:
    """No fastapi: `envckpt demo` exits 2 naming envckpt[http]; --ray also names envckpt[ray]."""
    done = core_only("demo", "--dir", str(tmp_path / "d"), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "pip install 'envckpt[http]'" in done.stderr and not (tmp_path / "d").exists()
    helped = core_only("demo", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "--instances" in helped.stdout


def demo_failing_on(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """Put in place an ``envckpt.demo`` whose main fails importing ``module`` mid-run."""

    def demo_main(argv: list[str]) -> int:
        raise ModuleNotFoundError(f"No module named '{module}'", name=module)

    fake = types.ModuleType("envckpt.demo")
    fake.main = demo_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "envckpt.demo", fake)


def test_missing_extra_errors_raised_inside_the_demo_are_named_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A demo that fails on an optional module mid-run exits 2 naming its extra."""
    demo_failing_on(monkeypatch, "ray")
    assert main(["demo"]) == 2
    assert "envckpt[ray]" in capsys.readouterr().err


def test_a_missing_module_that_is_no_extra_keeps_its_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ModuleNotFoundError of a module envckpt does not make optional is a bug: re-raised."""
    demo_failing_on(monkeypatch, "numpy")
    with pytest.raises(ModuleNotFoundError, match="numpy"):
        main(["demo"])


def test_the_snapshot_verbs_need_no_extra(tmp_path: Path) -> None:
    """`envckpt snapshots list` runs on a core-only install."""
    (tmp_path / "snapshots").mkdir()
    done = core_only("snapshots", "list", str(tmp_path), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["snapshots"] == []
