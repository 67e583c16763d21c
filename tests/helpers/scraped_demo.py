"""One real ``envckpt demo --dir D`` in its own process, its trainers scraped while it runs.

The demo's trainer names its Prometheus URL in the event log (``metrics``);
this follows the log, scrapes each URL it finds (a real HTTP GET) until one
scrape counts a published snapshot's pause, and keeps that exposition::

    run = run_scraped_demo(directory)
    run.code, run.verdict, run.scrapes          # exit code, verdict.json, [(url, text)]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envckpt.demo.events import EVENTS_NAME, read_events
from envckpt.demo.telemetry_hooks import METRICS_EVENT

from helpers.scrape import pause_count, scrape

# Small and quick: 2 instances, 8 rollouts, one kill after a snapshot, then the restore.
DEMO_ARGS = ("--instances", "2", "--rollouts", "8", "--kills", "1", "--snapshot-every", "0.3")
BUDGET_SECONDS = 300.0


@dataclass(frozen=True)
class ScrapedDemo:
    directory: Path
    code: int
    out: str
    verdict: dict[str, Any]
    scrapes: list[tuple[str, str]] = field(default_factory=list)


def run_scraped_demo(directory: Path, *, seed: int = 3) -> ScrapedDemo:
    output = directory.parent / f"{directory.name}.out"
    deadline = time.monotonic() + BUDGET_SECONDS
    scrapes: list[tuple[str, str]] = []
    with output.open("w") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "envckpt",
                "demo",
                "--dir",
                str(directory),
                "--seed",
                str(seed),
                *DEMO_ARGS,
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        try:
            while process.poll() is None:
                assert time.monotonic() < deadline, "the demo ran past its budget"
                if not scrapes:
                    _try_scrapes(directory, scrapes)
                time.sleep(0.1)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    verdict_path = directory / "verdict.json"
    verdict = json.loads(verdict_path.read_text()) if verdict_path.exists() else {}
    return ScrapedDemo(directory, process.returncode, output.read_text(), verdict, scrapes)


def _try_scrapes(directory: Path, scrapes: list[tuple[str, str]]) -> None:
    """Scrape every announced trainer; keep the first exposition that counted a pause."""
    urls = [e["url"] for e in read_events(directory / EVENTS_NAME) if e["event"] == METRICS_EVENT]
    for url in reversed(urls):  # the running trainer announced last
        try:
            text = scrape(url, timeout=2.0)
        except OSError:
            continue  # that trainer is gone (killed) or not serving yet
        if pause_count(text) >= 1:
            scrapes.append((url, text))
            return
