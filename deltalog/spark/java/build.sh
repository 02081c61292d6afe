#!/usr/bin/env bash
# Rebuilds ../jars/deltalog-spark.jar from the Java sources here, against the Spark and Hadoop classes that
# pyspark ships. Needs a JDK (javac). The jar is committed so that installs need no JDK.
set -euo pipefail
cd "$(dirname "$0")"
jars="$(${PYTHON:-python} -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
out="$(mktemp -d)"
javac --release 17 -cp "$jars/*" -d "$out" $(find . -name '*.java')
jar --create --file ../jars/deltalog-spark.jar --date=2026-01-01T00:00:00Z -C "$out" .
rm -rf "$out"
