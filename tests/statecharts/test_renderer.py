"""The renderer's plumbing: finding node, mermaid-cli and chromium; jobs in, SVGs out.

A stand-in ``node`` (a Python script) takes the place of mermaid-cli here, so
these tests run everywhere; ``test_render.py`` runs the real renderer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from envckpt.statecharts import renderer
from envckpt.statecharts.renderer import (
    Renderer,
    RendererMissing,
    RenderFailed,
    find_renderer,
    render_svgs,
)

FAKE_NODE = """\
import json, os, sys
from pathlib import Path
jobs = json.loads(Path(sys.argv[2]).read_text())
Path(os.environ["FAKE_LOG"]).write_text(json.dumps(
    {"script": sys.argv[1], "jobs": jobs, "chromium": os.environ.get("ENVCKPT_CHROMIUM"),
     "skip": os.environ.get("PUPPETEER_SKIP_DOWNLOAD")}))
for job in jobs:
    source = Path(job["input"]).read_text()
    if "refuse" in source:
        sys.exit("Parse error on line 2: " + job["input"])
    if "skip" not in source:
        Path(job["output"]).write_text("<svg>" + source + "</svg>")
"""


@pytest.fixture
def tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installed-looking tools/mermaid with a stand-in node and chromium."""
    directory = tmp_path / "tool"
    (directory / "node_modules" / "@mermaid-js" / "mermaid-cli").mkdir(parents=True)
    (directory / "render.mjs").write_text("// stand-in\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    node = bin_dir / "node"
    node.write_text(f"#!{sys.executable}\n{FAKE_NODE}")
    node.chmod(0o755)
    chromium = bin_dir / "chromium"
    chromium.write_text("#!/bin/sh\n")
    chromium.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv(renderer.TOOL_ENV, str(directory))
    monkeypatch.setenv(renderer.CHROMIUM_ENV, str(chromium))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "fake.json"))
    return directory


def test_find_renderer_names_its_parts(tool: Path) -> None:
    """With everything installed, find_renderer() returns node, the script and chromium."""
    found = find_renderer()
    assert found.node.endswith("/bin/node")
    assert found.script == tool / "render.mjs"
    assert found.chromium.endswith("/bin/chromium")


def test_without_node_the_error_says_so(tool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No node on PATH: RendererMissing names Node.js and the install command."""
    monkeypatch.setenv("PATH", str(tool))
    with pytest.raises(RendererMissing, match=r"Node.js \(node\) is not on PATH; .*make mermaid"):
        find_renderer()


def test_without_mermaid_cli_the_error_says_so(tool: Path) -> None:
    """A tool directory without node_modules: RendererMissing names mermaid-cli."""
    (tool / "node_modules" / "@mermaid-js" / "mermaid-cli").rmdir()
    with pytest.raises(RendererMissing, match=r"mermaid-cli is not installed in .*make mermaid"):
        find_renderer()


def test_without_the_script_the_error_says_so(tool: Path) -> None:
    """A directory that is not tools/mermaid: RendererMissing names the script."""
    (tool / "render.mjs").unlink()
    with pytest.raises(RendererMissing, match=r"render.mjs does not exist"):
        find_renderer()


def test_without_chromium_the_error_says_so(
    tool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No browser at the configured path: RendererMissing names it."""
    monkeypatch.setenv(renderer.CHROMIUM_ENV, str(tmp_path / "no-chromium"))
    with pytest.raises(RendererMissing, match=r"no Chromium at .*no-chromium; .*apt-get install"):
        find_renderer()


def test_render_svgs_sends_every_chart_in_one_run(tool: Path, tmp_path: Path) -> None:
    """One renderer run gets every chart; each SVG lands as <name>.svg in the directory."""
    out = tmp_path / "out"
    written = render_svgs({"a": "stateDiagram-v2\n", "b.overlay": "flowchart TB\n"}, out)
    assert written == [out / "a.svg", out / "b.overlay.svg"]
    assert (out / "a.svg").read_text() == "<svg>stateDiagram-v2\n</svg>"
    log = json.loads((tmp_path / "fake.json").read_text())
    assert log["script"] == str(tool / "render.mjs")
    assert [Path(job["output"]).name for job in log["jobs"]] == ["a.svg", "b.overlay.svg"]
    assert log["skip"] == "1" and log["chromium"].endswith("/bin/chromium")


def test_a_refused_chart_is_a_render_failure(tool: Path, tmp_path: Path) -> None:
    """The renderer's own error message comes back in RenderFailed."""
    with pytest.raises(RenderFailed, match=r"failed \(exit 1\): Parse error on line 2"):
        render_svgs({"bad": "refuse\n"}, tmp_path / "out")


def test_a_chart_the_renderer_skipped_is_noticed(tool: Path, tmp_path: Path) -> None:
    """An SVG left over from an earlier run does not hide a chart that was not rendered."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "gone.svg").write_text("<svg>old</svg>")
    with pytest.raises(RenderFailed, match=r"wrote no .*gone.svg"):
        render_svgs({"gone": "skip\n"}, out)


def test_a_hanging_renderer_times_out(tmp_path: Path) -> None:
    """A renderer that does not finish in time is a RenderFailed, not a hang."""
    sleeper = tmp_path / "node"
    sleeper.write_text(f"#!{sys.executable}\nimport time; time.sleep(30)\n")
    sleeper.chmod(0o755)
    slow = Renderer(node=str(sleeper), script=tmp_path / "render.mjs", chromium="/bin/true")
    with pytest.raises(RenderFailed, match="took over 1 s"):
        render_svgs({"a": "x"}, tmp_path / "out", renderer=slow, timeout=1.0)
