"""Render Mermaid charts to SVG with the real renderer: mermaid-cli in Chromium.

The renderer is a Node.js tool pinned in ``tools/mermaid/`` (``package.json``
and its lock file; ``make`` installs it with ``npm ci`` and Debian's
``chromium``). ``render_svgs`` starts ONE browser for all the charts it is
given, since starting Chromium costs seconds and a chart does not:

    find_renderer()     # Renderer(...), or RendererMissing saying what to install
    render_svgs({"instance_lifecycle": chart}, Path("out"))   # [Path("out/instance_lifecycle.svg")]

``ENVCKPT_MERMAID_TOOL`` names another tool directory and ``ENVCKPT_CHROMIUM``
another browser.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

TOOL_ENV = "ENVCKPT_MERMAID_TOOL"
CHROMIUM_ENV = "ENVCKPT_CHROMIUM"
DEFAULT_CHROMIUM = "/usr/bin/chromium"
# The checkout's tools/mermaid (envckpt/machines/renderer.py -> the repository root).
DEFAULT_TOOL = Path(__file__).resolve().parents[2] / "tools" / "mermaid"
INSTALL_HINT = (
    "install it with `make mermaid` (apt-get install chromium;"
    " PUPPETEER_SKIP_DOWNLOAD=1 npm ci --prefix tools/mermaid)"
)


class RendererMissing(RuntimeError):
    """The Mermaid renderer (node, mermaid-cli or chromium) is not installed."""


class RenderFailed(RuntimeError):
    """The renderer ran and refused a chart (its message says which)."""


@dataclass(frozen=True, slots=True)
class Renderer:
    """Where the pieces of the renderer are."""

    node: str
    script: Path
    chromium: str


def find_renderer() -> Renderer:
    """The installed renderer; ``RendererMissing`` names the missing piece and the fix."""
    tool = Path(os.environ.get(TOOL_ENV) or DEFAULT_TOOL)
    node = shutil.which("node")
    if node is None:
        raise RendererMissing(f"Node.js (node) is not on PATH; {INSTALL_HINT}")
    script = tool / "render.mjs"
    if not script.is_file():
        raise RendererMissing(f"{script} does not exist; {TOOL_ENV} must name tools/mermaid")
    if not (tool / "node_modules" / "@mermaid-js" / "mermaid-cli").is_dir():
        raise RendererMissing(f"mermaid-cli is not installed in {tool}; {INSTALL_HINT}")
    chromium = os.environ.get(CHROMIUM_ENV) or DEFAULT_CHROMIUM
    if not os.access(chromium, os.X_OK):
        raise RendererMissing(f"no Chromium at {chromium}; {INSTALL_HINT}")
    return Renderer(node=node, script=script, chromium=chromium)


def render_svgs(
    charts: Mapping[str, str],
    directory: Path,
    *,
    renderer: Renderer | None = None,
    timeout: float = 300.0,
) -> list[Path]:
    """Write ``directory/<name>.svg`` for each ``name -> Mermaid text``; return the paths."""
    renderer = renderer or find_renderer()
    directory.mkdir(parents=True, exist_ok=True)
    outputs = [directory / f"{name}.svg" for name in charts]
    with tempfile.TemporaryDirectory(prefix="envckpt-mermaid-") as scratch:
        jobs = []
        for (name, text), output in zip(charts.items(), outputs, strict=True):
            output.unlink(missing_ok=True)  # so a chart the renderer skipped is noticed
            source = Path(scratch) / f"{name}.mmd"
            source.write_text(text, encoding="utf-8")
            jobs.append({"input": str(source), "output": str(output.resolve())})
        job_file = Path(scratch) / "jobs.json"
        job_file.write_text(json.dumps(jobs), encoding="utf-8")
        env = dict(os.environ, PUPPETEER_SKIP_DOWNLOAD="1", **{CHROMIUM_ENV: renderer.chromium})
        try:
            result = subprocess.run(
                [renderer.node, str(renderer.script), str(job_file)],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RenderFailed(f"the Mermaid renderer took over {timeout:.0f} s") from None
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip()[-2000:]
        raise RenderFailed(f"the Mermaid renderer failed (exit {result.returncode}): {detail}")
    missing = [str(path) for path in outputs if not path.is_file()]
    if missing:
        raise RenderFailed(f"the Mermaid renderer wrote no {', '.join(missing)}")
    return outputs
