"""Regenerate the console screenshots of docs/operations.md (docs/images/console-*.png).

They are the ones the browser test takes (tests/clients/test_console_browser.py): this runs
that test with LOGLAKE_CONSOLE_SCREENSHOTS pointing at docs/images, so the pictures always
show what the test checked. Needs what the test needs: chromium and chromium-driver
(scripts/setup.sh installs them).

    .venv/bin/python scripts/console_screenshots.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"


def main() -> int:
    IMAGES.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "LOGLAKE_CONSOLE_SCREENSHOTS": str(IMAGES)}
    test = "tests/clients/test_console_browser.py"
    code = subprocess.call([sys.executable, "-m", "pytest", test, "-q", "-p", "no:cacheprovider"], cwd=ROOT, env=env)
    if code == 0:
        for shot in sorted(IMAGES.glob("console-*.png")):
            print(f"{shot.relative_to(ROOT)}\t{shot.stat().st_size} bytes")
    return code


if __name__ == "__main__":
    sys.exit(main())
