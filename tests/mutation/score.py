"""Print the mutation score per module from mutmut's results (``make mutation``).

    python tests/mutation/score.py MUTANTS_DIR_PARENT [--fail-under 90] [--equivalent FILE]
    # envckpt.gym.adapter  368/368  100.0%  (equivalent: 1; raw 368/369 99.7%)
    # total  1088/1099  99.0%  (equivalent: 2; raw 1088/1101 98.8%)

"no tests" and "survived" both count as not killed. A mutant mutmut could not
judge (a timeout: the tests hung, so mutmut counts it as caught; suspicious;
not checked) is named apart and not counted. Mutants listed in
``equivalent.toml`` (no behaviour can tell them from the original) are left
out of the first score; the raw score counts them as survivors. A listed
mutant that was killed, or that the results do not name, is reported as a
stale entry. With ``--fail-under P`` the exit status is 1 when any module, or
the total, scores below P percent with its equivalents left out.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

EQUIVALENT_FILE = Path(__file__).with_name("equivalent.toml")
NOT_KILLED = ("survived", "no tests")


class EquivalentListError(ValueError):
    """equivalent.toml is malformed: an entry lacks a field or names another module."""


@dataclass(frozen=True, slots=True)
class Equivalent:
    """A surviving mutant no test can kill, and why."""

    module: str
    mutant: str
    reason: str


def module_of(mutant: str) -> str:
    """``envckpt.a.b.x_f__mutmut_3`` and ``envckpt.a.b.xǁCǁm__mutmut_3`` -> ``envckpt.a.b``."""
    return mutant.split(".x_")[0].split(".xǁ")[0]


def scores(lines: Iterable[str]) -> dict[str, dict[str, str]]:
    """Each module's mutants and their status, from ``mutmut results --all true`` lines."""
    by_module: dict[str, dict[str, str]] = defaultdict(dict)
    for line in lines:
        name, _, status = line.strip().rpartition(": ")
        if not name or "__mutmut_" not in name:
            continue
        by_module[module_of(name)][name] = status
    return dict(by_module)


def load_equivalents(text: str) -> tuple[Equivalent, ...]:
    """The ``[[equivalent]]`` entries of equivalent.toml, each checked."""
    entries = tomllib.loads(text).get("equivalent", [])
    found = []
    for entry in entries:
        if not all(isinstance(entry.get(k), str) and entry[k] for k in Equivalent.__match_args__):
            raise EquivalentListError(f"an entry needs module, mutant and reason: {entry}")
        if module_of(entry["mutant"]) != entry["module"]:
            raise EquivalentListError(f"{entry['mutant']} is not a mutant of {entry['module']}")
        found.append(Equivalent(entry["module"], entry["mutant"], entry["reason"]))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Score:
    """One module's (or the total's) counts."""

    killed: int
    judged: int
    equivalent: int
    not_judged: int

    @property
    def raw(self) -> float:
        return 100.0 * self.killed / self.judged if self.judged else 0.0

    @property
    def net(self) -> float:
        """The score with the equivalent mutants left out."""
        total = self.judged - self.equivalent
        return 100.0 * self.killed / total if total else 0.0

    def line(self, what: str) -> str:
        text = (
            f"{what}  {self.killed}/{self.judged - self.equivalent}  {self.net:.1f}%  "
            f"(equivalent: {self.equivalent}; raw {self.killed}/{self.judged} {self.raw:.1f}%)"
        )
        if self.not_judged:
            text += f"  {self.not_judged} not judged (timeout, suspicious, not checked)"
        return text


def score_of(statuses: Mapping[str, str], equivalent: frozenset[str]) -> Score:
    counts = Counter(statuses.values())
    judged = counts["killed"] + sum(counts[s] for s in NOT_KILLED)
    listed = sum(
        1 for name, status in statuses.items() if status in NOT_KILLED and name in equivalent
    )
    return Score(counts["killed"], judged, listed, len(statuses) - judged)


def report(
    by_module: dict[str, dict[str, str]],
    fail_under: float | None,
    equivalents: tuple[Equivalent, ...] = (),
) -> tuple[str, int]:
    """One line per module and the total; status 1 if a score is below ``fail_under``."""
    listed = frozenset(e.mutant for e in equivalents)
    lines, low = [], []
    # ``make mutation MODULES=...`` leaves the other modules' mutants "not checked":
    # those modules did not run, so they are named but neither scored nor failed.
    ran = {m: s for m, s in by_module.items() if set(s.values()) != {"not checked"}}
    per_module = {module: score_of(statuses, listed) for module, statuses in sorted(ran.items())}
    for module, score in per_module.items():
        lines.append(score.line(module))
        if fail_under is not None and score.net < fail_under:
            low.append(module)
    for module in sorted(by_module.keys() - ran.keys()):
        lines.append(f"{module}  not run")
    total = Score(*(sum(getattr(s, f.name) for s in per_module.values()) for f in fields(Score)))
    lines.append(total.line("total"))
    # An entry is stale when its module ran and the mutant did not survive
    # (killed, or renumbered after an edit): it would hide nothing, or the wrong one.
    for entry in equivalents:
        status = ran.get(entry.module, {}).get(entry.mutant, "not in the results")
        if entry.module in ran and status not in NOT_KILLED:
            lines.append(f"stale equivalent entry: {entry.mutant} ({status})")
    if fail_under is not None and (total.net < fail_under or not ran):
        low.append("the total")
    if low:
        lines.append(f"below {fail_under:g}%: {', '.join(low)}")
    return "\n".join(lines), 1 if low else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="score.py", description=__doc__)
    parser.add_argument("where", nargs="?", default=".", help="the directory mutmut ran in")
    parser.add_argument("--fail-under", type=float, default=None, metavar="PERCENT")
    parser.add_argument("--equivalent", type=Path, default=EQUIVALENT_FILE, metavar="FILE")
    args = parser.parse_args(argv[1:])
    equivalents = load_equivalents(args.equivalent.read_text(encoding="utf-8"))
    out = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"],
        cwd=args.where,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    text, status = report(scores(out.splitlines()), args.fail_under, equivalents)
    print(text)
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
