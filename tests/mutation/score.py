"""Print the mutation score per module from mutmut's results (``make mutation``).

    python tests/mutation/score.py MUTANTS_DIR_PARENT [--fail-under 90]
    # envckpt.gym.adapter: 368/369 killed (99.7%), 1 survived, 0 no tests
    # mutation score: 1088/1101 killed (98.8%), 13 survived, 0 no tests, 1 not judged (...)

"no tests" and "survived" both count as not killed; a mutant mutmut could not
judge (a timeout: the tests hung, so mutmut counts it as caught; suspicious;
not checked) is listed apart and not counted. With ``--fail-under P`` the
exit status is 1 when any module, or the total, is below P percent.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable


def scores(lines: Iterable[str]) -> dict[str, Counter[str]]:
    """Statuses per module, from ``mutmut results --all true`` lines."""
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    for line in lines:
        name, _, status = line.strip().rpartition(": ")
        if not name or "__mutmut_" not in name:
            continue
        module = name.split(".x")[0].split(".x_")[0]
        by_module[module][status] += 1
    return dict(by_module)


def share(counts: Counter[str]) -> float:
    judged = counts["killed"] + counts["survived"] + counts["no tests"]
    return 100.0 * counts["killed"] / judged if judged else 0.0


def line(what: str, counts: Counter[str]) -> str:
    judged = counts["killed"] + counts["survived"] + counts["no tests"]
    other = sum(counts.values()) - judged
    return (
        f"{what}: {counts['killed']}/{judged} killed ({share(counts):.1f}%), "
        f"{counts['survived']} survived, {counts['no tests']} no tests"
        + (f", {other} not judged (timeout, suspicious, not checked)" if other else "")
    )


def report(by_module: dict[str, Counter[str]], fail_under: float | None) -> tuple[str, int]:
    """The per-module lines and the total; status 1 if a share is below ``fail_under``."""
    total: Counter[str] = Counter()
    lines, low = [], []
    for module, counts in sorted(by_module.items()):
        total.update(counts)
        lines.append(line(module, counts))
        if fail_under is not None and share(counts) < fail_under:
            low.append(module)
    lines.append(line("mutation score", total))
    if fail_under is not None and (share(total) < fail_under or not by_module):
        low.append("the total")
    if low:
        lines.append(f"below {fail_under:g}%: {', '.join(low)}")
    return "\n".join(lines), 1 if low else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="score.py", description=__doc__)
    parser.add_argument("where", nargs="?", default=".", help="the directory mutmut ran in")
    parser.add_argument("--fail-under", type=float, default=None, metavar="PERCENT")
    args = parser.parse_args(argv[1:])
    out = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"],
        cwd=args.where,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    text, status = report(scores(out.splitlines()), args.fail_under)
    print(text)
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
