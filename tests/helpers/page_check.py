"""Looking at a report page in headless Chromium, and judging what a person would see.

    shown = look_at([Page(html, screenshot)], scratch)      # one browser for all pages
    problems = judge(shown[0], verdict)                      # [] when the page is right

``look_at`` runs ``page_check.mjs`` with the Puppeteer that ``tools/mermaid``
pins (``make mermaid``) on Debian's chromium; ``PageCheckUnavailable`` when
either is missing. ``judge`` is the check: no console or page error, no
request leaving the file, every figure with drawn data, the timeline's
snapshot bars as many as ``verdict.json``'s ``snapshots_published``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).with_name("page_check.mjs")
TOOL = Path(__file__).resolve().parents[2] / "tools" / "mermaid"
CHROMIUM = os.environ.get("ENVCKPT_CHROMIUM", "/usr/bin/chromium")
FIGURES = ("timeline", "latency", "phases", "bytes")


class PageCheckUnavailable(RuntimeError):
    """node, Puppeteer (tools/mermaid) or chromium is missing."""


@dataclass(frozen=True)
class Page:
    html: Path
    screenshot: Path | None = None


def look_at(
    pages: Sequence[Page], scratch: Path, *, timeout: float = 240.0
) -> list[dict[str, Any]]:
    """What Chromium shows of each page (see page_check.mjs)."""
    node = shutil.which("node")
    if node is None or not (TOOL / "node_modules" / "puppeteer").is_dir():
        raise PageCheckUnavailable("node and tools/mermaid's puppeteer are needed: make mermaid")
    if not os.access(CHROMIUM, os.X_OK):
        raise PageCheckUnavailable(f"no chromium at {CHROMIUM}: make mermaid")
    profile = scratch / "chromium-profile"
    profile.mkdir(parents=True, exist_ok=True)
    jobs = scratch / "pages.json"
    jobs.write_text(
        json.dumps(
            {
                "tool": str(TOOL),
                "chromium": CHROMIUM,
                "profile": str(profile),
                "pages": [
                    {"html": str(p.html), "screenshot": str(p.screenshot) if p.screenshot else ""}
                    for p in pages
                ],
            }
        )
    )
    done = subprocess.run(
        [node, str(SCRIPT), str(jobs)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "PUPPETEER_SKIP_DOWNLOAD": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shown: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return shown


def judge(shown: Mapping[str, Any], verdict: Mapping[str, Any]) -> list[str]:
    """Every way the page differs from what a person should see (empty: it is right)."""
    problems = [f"console error: {text}" for text in shown["console_errors"]]
    problems += [f"page error: {text}" for text in shown["page_errors"]]
    problems += [f"the page fetched {url}" for url in shown["requests"]]
    for name in FIGURES:
        if shown["figures"].get(name, 0) <= 0:
            problems.append(f"the {name} figure draws no data")
    expected = verdict["snapshots_published"]
    if shown["timeline_snapshots"] != expected:
        problems.append(
            f"the timeline shows {shown['timeline_snapshots']} snapshots, verdict.json {expected}"
        )
    return problems
