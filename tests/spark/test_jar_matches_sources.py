"""The committed `deltalog/spark/jars/deltalog-spark.jar` is what its Java sources build to: the jar is
rebuilt by `deltalog/spark/java/build.sh` and every class in it compared, byte for byte, with the
committed one. A source edited without rebuilding the jar (or the reverse) fails here. Skipped without a
JDK (javac), except in CI."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.maven import in_ci

ROOT = Path(__file__).resolve().parents[2]
JAVA = ROOT / "deltalog" / "spark" / "java"
JAR = ROOT / "deltalog" / "spark" / "jars" / "deltalog-spark.jar"


def _classes(jar: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(jar) as z:
        return {n: z.read(n) for n in z.namelist() if n.endswith(".class")}


def test_the_committed_jar_is_built_from_the_sources(tmp_path):
    if shutil.which("javac") is None or shutil.which("jar") is None:
        if in_ci():
            pytest.fail("CI needs a JDK (javac, jar) to rebuild deltalog-spark.jar from its sources")
        pytest.skip("no JDK (javac, jar) on this machine to rebuild deltalog-spark.jar from its sources")
    rebuilt = tmp_path / "deltalog-spark.jar"
    build = subprocess.run(["bash", str(JAVA / "build.sh"), str(rebuilt)], capture_output=True, text=True,
                           env={**os.environ, "PYTHON": sys.executable}, timeout=600)
    assert build.returncode == 0, f"build.sh failed:\n{build.stdout[-2000:]}{build.stderr[-3000:]}"
    ours, built = _classes(JAR), _classes(rebuilt)
    assert sorted(ours) == sorted(built), "the committed jar's classes are not the ones the sources build to"
    differ = [name for name in built if ours[name] != built[name]]
    assert not differ, (f"classes in {JAR.relative_to(ROOT)} differ from what {JAVA.relative_to(ROOT)} builds to: "
                        f"{differ}. Rebuild it with `bash deltalog/spark/java/build.sh` and commit the jar.")
