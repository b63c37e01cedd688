"""The verdicts every checker shares (`llmdeck doctor`, `llmdeck cluster doctor`): one
Check per thing looked at, and the report that prints them. It sits low so each checker
can use it without importing another's checks (the doctor asks the service; the cluster's
doctor must not reach it through here)."""

from __future__ import annotations

from dataclasses import dataclass

OK, WARN, PROBLEM = "ok", "warn", "problem"


@dataclass(frozen=True, slots=True)
class Check:
    """One answer: what was looked at, the verdict, what was found, and the fix."""

    name: str
    status: str  # ok | warn | problem
    detail: str
    fix: str = ""


def report(checks: list[Check]) -> str:
    """One line per check (its fix under it), then the count a script or a person reads."""
    marks = {OK: "ok  ", WARN: "warn", PROBLEM: "FAIL"}
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{marks[c.status]}  {c.name:<{width}}  {c.detail}")
        if c.fix:
            lines.append(f"      {'':<{width}}  fix: {c.fix}")
    problems = sum(c.status == PROBLEM for c in checks)
    warns = sum(c.status == WARN for c in checks)
    lines.append("")
    lines.append(f"{problems} problem{'s' * (problems != 1)}, {warns} warning"
                 f"{'s' * (warns != 1)}." if problems or warns else "All good.")
    return "\n".join(lines)
