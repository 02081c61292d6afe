#!/usr/bin/env bash
# Rebuilds ../jars/deltalog-spark.jar (or the jar named by $1) from the Java sources here, against the Spark
# and Hadoop classes that pyspark ships. Needs a JDK (javac). The jar is committed so that installs need no
# JDK; tests/spark/test_jar_matches_sources.py rebuilds it and fails when the committed jar differs.
set -euo pipefail
target="$(realpath -m "${1:-$(dirname "$0")/../jars/deltalog-spark.jar}")"
cd "$(dirname "$0")"
jars="$(${PYTHON:-python} -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
javac --release 17 -cp "$jars/*" -d "$out" $(find . -name '*.java' | sort)
jar --create --file "$target" --date=2026-01-01T00:00:00Z -C "$out" .
