"""The docs: the site builds with `mkdocs build --strict` (a broken link or a page outside the nav fails
it), the README stays a five-minute read that opens with the two set-up commands `.ci/run` relies on,
and nothing a user reads points outside the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
READER_FACING = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md",
                 *sorted((ROOT / "docs").glob("*.md"))]


def test_the_site_builds_strictly(tmp_path):
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert (tmp_path / "site" / "iceberg" / "index.html").exists()


def test_every_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for value in node.values():
                yield from pages(value)
        elif isinstance(node, list):
            for value in node:
                yield from pages(value)

    assert sorted(pages(config["nav"])) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))


def test_the_readme_opens_with_the_two_set_up_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1).strip().splitlines()
    assert len(block) == 2, block
    assert block[0].endswith("# install, build the example project") and "dbt build" in block[0]
    assert block[1].endswith("# install, run the tests") and "pytest" in block[1]
    assert "# install, run the tests" in (ROOT / ".ci" / "run").read_text()  # .ci/run runs that line


def test_nothing_points_outside_the_repository():
    for path in READER_FACING:
        assert "../shared" not in path.read_text(), path.name
