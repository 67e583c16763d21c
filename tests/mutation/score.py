"""Print the mutation score per module from mutmut's results (``make mutation``).

    python tests/mutation/score.py MUTANTS_DIR_PARENT
    # envckpt.gym.adapter: 231/262 killed (88.2%), 31 survived, 0 no tests
    # mutation score: 612/680 killed (90.0%)

"no tests" and "survived" both count as not killed; a mutant mutmut could not
check (timeout, suspicious) is listed apart and not counted.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter, defaultdict


def main(argv: list[str]) -> int:
    where = argv[1] if len(argv) > 1 else "."
    out = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"],
        cwd=where,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    for line in out.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if not name or "__mutmut_" not in name:
            continue
        module = name.split(".x")[0].split(".x_")[0]
        by_module[module][status] += 1
    total: Counter[str] = Counter()
    for module, counts in sorted(by_module.items()):
        total.update(counts)
        print(_line(module, counts))
    print(_line("mutation score", total))
    return 0


def _line(what: str, counts: Counter[str]) -> str:
    judged = counts["killed"] + counts["survived"] + counts["no tests"]
    share = 100.0 * counts["killed"] / judged if judged else 0.0
    other = sum(counts.values()) - judged
    return (
        f"{what}: {counts['killed']}/{judged} killed ({share:.1f}%), "
        f"{counts['survived']} survived, {counts['no tests']} no tests"
        + (f", {other} not judged (timeout, suspicious, not checked)" if other else "")
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
