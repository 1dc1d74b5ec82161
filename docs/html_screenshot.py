"""The README's screenshot of an HTML report page: designs/fat-tree-1k.yaml through `topoplan report --format
html`, photographed at 1280x800 by headless chromium (Debian's package; nothing downloads a browser).

    python docs/html_screenshot.py            # writes docs/report-1k.png
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from click.testing import CliRunner

    from topoplan.cli import main as topoplan

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("html_screenshot: chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 1
    target = ROOT / "docs" / "report-1k.png"
    with tempfile.TemporaryDirectory(prefix="topoplan-shot-") as folder:
        page = Path(folder) / "report.html"
        result = CliRunner().invoke(topoplan, ["report", str(ROOT / "designs/fat-tree-1k.yaml"), "--format", "html",
                                               "-o", str(page)])
        if result.exit_code:
            print(result.output, file=sys.stderr)
            return 1
        done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               f"--user-data-dir={folder}/profile", f"--screenshot={target}",
                               "--window-size=1280,800", page.as_uri()], capture_output=True, text=True, cwd=folder)
    if done.returncode or not target.exists():
        print(done.stderr, file=sys.stderr)
        return 1
    print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
