"""Regenerate the README's screenshots: `.venv/bin/python docs/screenshots.py`.

Runs the guide's snapshot tests (tests/snapshots/test_guide_snapshots.py) with
--snapshot-update, then copies their SVGs into docs/ under the names the README uses.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = ROOT / "tests" / "snapshots" / "__snapshots__" / "test_guide_snapshots"
PICTURES = {  # snapshot test -> file in docs/
    "test_guide_main_screen": "main-screen.svg",
    "test_guide_hub": "hub.svg",
    "test_guide_reasoning_reply_with_a_tool_call": "reasoning-and-tool-call.svg",
}


def main() -> int:
    test = "tests/snapshots/test_guide_snapshots.py"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", test, "--snapshot-update"],
                          cwd=ROOT)
    if done.returncode != 0:
        return done.returncode
    for name, picture in PICTURES.items():
        shutil.copyfile(SNAPSHOTS / f"{name}.svg", ROOT / "docs" / picture)
        print(f"docs/{picture}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
