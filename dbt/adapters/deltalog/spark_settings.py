"""Our own keys among a profile's `spark_conf`, `spark.deltalog.*`: what each switch does, one reading of a
switch, and one check that refuses a misspelt key or a switch set to anything but true or false (Spark
ignores keys it does not know, so a typo would otherwise pass without a word)."""
from __future__ import annotations

import difflib
from typing import Any, Mapping, Optional

PREFIX = "spark.deltalog."

CLASS_ARCHIVE = "spark.deltalog.classArchive"
LATE_COMPILER = "spark.deltalog.lateOptimizingCompiler"
START_EARLY = "spark.deltalog.startEarly"
ARROW_SEEDS = "spark.deltalog.arrowSeeds"
ANSWER_REUSE = "spark.deltalog.answerReuse"
ANALYSIS_HERE = "spark.deltalog.analysisHere"

# On unless spark_conf sets them to false (docs/profiles.md says when one would)
SWITCHES = {
    CLASS_ARCHIVE: "a local JVM starts from a class-data-sharing archive of the Spark driver",
    LATE_COMPILER: "a local JVM's optimizing compiler starts after ten times the usual calls",
    START_EARLY: "the Spark session starts while dbt parses the project",
    ARROW_SEEDS: "a seed Spark's load would give the same table is written without Spark",
    ANSWER_REUSE: "a data test answered here takes an earlier command's answer while nothing it reads changed",
    ANALYSIS_HERE: "a small model's schema and a view's columns are worked out here when the model rules cover "
                   "its SQL",
}

# Read by the dbt process alone, never by Spark: one Spark server serves every value of them
PROCESS_ONLY = (START_EARLY, ARROW_SEEDS, ANSWER_REUSE, ANALYSIS_HERE)

# Set by the adapter in the conf it starts a local JVM with, never by a profile: where the JVM's log goes
LOG_FILE = "spark.deltalog.logFile"


def switched_on(conf: Optional[Mapping[str, Any]], switch: str) -> bool:
    return str((conf or {}).get(switch, "true")).strip().lower() != "false"


def problems(conf: Optional[Mapping[str, Any]]) -> list[str]:
    """What is wrong with the `spark.deltalog.*` keys of `conf`, each said with what is allowed."""
    found, unknown = [], False
    for key, value in (conf or {}).items():
        key = str(key)
        if not key.startswith(PREFIX):
            continue
        if key not in SWITCHES:
            unknown = True
            close = difflib.get_close_matches(key, list(SWITCHES), n=1, cutoff=0.85)
            found.append(f"`{key}` is not a setting of this adapter" + (f" (did you mean `{close[0]}`?)." if close else "."))
        elif str(value).strip().lower() not in ("true", "false"):
            found.append(f"`{key}` is {value!r}; allowed: true or false (true: {SWITCHES[key]}).")
    if unknown:
        found.append("Its settings, each true unless set to false: "
                     + "; ".join(f"`{k}` ({meaning})" for k, meaning in SWITCHES.items()) + ".")
    return found


def settings_refusal(spark_conf: Any, spark: Any = None) -> Optional[str]:
    """Why the model rules do not hold under these Spark settings, else None. They hold in Spark's ANSI
    mode (its default: overflows and bad casts fail there, as in DuckDB), so not with a profile's
    `spark.sql.legacy.*` or `spark.sql.ansi.*` keys, nor in a session SET otherwise (a hook)."""
    legacy = sorted(k for k in (spark_conf or {}) if str(k).startswith(("spark.sql.legacy.", "spark.sql.ansi.")))
    if legacy:
        return f"Spark settings {legacy}"
    if spark is not None and str(spark.conf.get("spark.sql.ansi.enabled", "true")).lower() != "true":
        return "spark.sql.ansi.enabled is not true"
    return None
