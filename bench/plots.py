"""The plots of docs/benchmarks.md, one function per plot, drawn from what a bench's `--json` writes.

The benches import this module only when given `--plot`, so they run without matplotlib otherwise
(`pip install -e '.[bench]'` installs it). To redraw a plot from a saved result without running again:

    python bench/plots.py realtime-latency realtime.json docs/img/realtime-latency.svg
    python bench/plots.py realtime-files   realtime.json docs/img/realtime-files.svg
    python bench/plots.py dev-loop         dev_loop.json docs/img/dev-loop-builds.svg
    python bench/plots.py merge-sweep      merge.json    docs/img/merge-share-changed.svg
    python bench/plots.py server-soak      soak.json     docs/img/server-soak.svg
"""
from __future__ import annotations

import json
import sys

WIDTH = 7.0  # inches: about the docs' content width at 100 dpi, so text is read at its own size
COLORS = {"auto": "#1f77b4", "plain": "#ff7f0e", "first": "#9ecae1", "second": "#1f77b4",
          "cow": "#d62728", "dv": "#2ca02c", "rebuild": "#555555"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display here, and none wanted
    matplotlib.rcParams.update({
        "svg.fonttype": "none",  # text as text: a tenth of the size of glyphs drawn as paths
        "svg.hashsalt": "deltalog",  # the same result draws the same file (no random ids in the diff)
        "font.size": 9, "axes.titlesize": 10, "axes.spines.top": False, "axes.spines.right": False,
        "axes.grid": True, "grid.alpha": 0.3, "figure.facecolor": "white", "legend.frameon": False,
    })
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str) -> None:
    fig.tight_layout()
    if path.endswith(".svg"):
        fig.savefig(path, metadata={"Date": None})  # no timestamp: redrawing the same result changes nothing
    else:
        fig.savefig(path, dpi=100)  # e.g. a .png to look at where nothing shows SVG
    import matplotlib.pyplot as plt

    plt.close(fig)
    print(f"plot written to {path}", flush=True)


def _run_label(run: dict) -> str:
    return "auto_compact: true" if run["auto_compact"] else "without auto_compact"


def realtime_latency(runs: list[dict], path: str) -> None:
    """Latency from landing to committed in silver, per silver commit, over the run: the commit's median
    row as a line, its first and last rows as a band; one colour per run."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH, 3.0))
    for run in runs:
        commits = run["commits"]  # [seconds since the first file landed, rows, min, median, max latency]
        if not commits:
            continue
        color = COLORS["auto" if run["auto_compact"] else "plain"]
        t = [c[0] for c in commits]
        ax.fill_between(t, [c[2] for c in commits], [c[4] for c in commits], color=color, alpha=0.2, lw=0,
                        step="mid")
        ax.plot(t, [c[3] for c in commits], color=color, lw=1.2, drawstyle="steps-mid",
                label=f"{_run_label(run)} (p50 {run['latency_p50_s']} s, p99 {run['latency_p99_s']} s)")
    ax.axhline(10, color="#999999", ls=":", lw=1)
    ax.annotate("target p99 ≤ 10 s", (0.005, 10), xycoords=("axes fraction", "data"), va="bottom",
                color="#777777", fontsize=8)
    ax.set_ylim(0, max(11.5, ax.get_ylim()[1]))
    ax.set_xlabel("time since the first file landed (s)")
    ax.set_ylabel("landing → committed in silver (s)")
    ax.set_title("Streaming latency per silver commit (line: median row; band: first to last row)")
    ax.legend(loc="upper right", fontsize=8)
    _save(fig, path)


def realtime_files(runs: list[dict], path: str) -> None:
    """Live files of bronze and silver over the run, one panel per table, one colour per run."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 2.8), sharey=True)
    for i, table in enumerate(("bronze", "silver")):
        ax = axes[i]
        for run in runs:
            samples = [(row[0], row[i + 1]) for row in run["files_over_time"] if row[i + 1] is not None]
            ax.plot([s[0] for s in samples], [s[1] for s in samples], drawstyle="steps-post", lw=1.4,
                    color=COLORS["auto" if run["auto_compact"] else "plain"], label=_run_label(run))
        ax.set_title(f"{table}: live files")
        ax.set_xlabel("time since the first file landed (s)")
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("files in the latest snapshot")
    axes[0].legend(loc="upper left", fontsize=8)
    _save(fig, path)


def dev_loop_builds(results: dict, path: str) -> None:
    """`dbt build` wall time per way, first and second build (best of the rounds), one panel per project."""
    plt = _pyplot()
    projects = list(results["best"])
    fig, axes = plt.subplots(1, len(projects), figsize=(WIDTH if len(projects) > 1 else WIDTH * 0.75, 3.0),
                             squeeze=False)
    for ax, kind in zip(axes[0], projects):
        best = results["best"][kind]
        ways = list(best)
        width = 0.38
        for j, run in enumerate(("first", "second")):
            xs = [k + (j - 0.5) * width for k in range(len(ways))]
            bars = ax.bar(xs, [best[w][run] or 0 for w in ways], width, color=COLORS[run], label=f"{run} build")
            ax.bar_label(bars, fmt="%.1f s", fontsize=8, padding=2)
        ax.set_xticks(range(len(ways)), ways)
        ax.set_ylabel("wall time of dbt build (s)")
        rounds = f"best of {results['rounds']} rounds" if results["rounds"] > 1 else "one round"
        ax.set_title(f"{kind}: {results['nodes'][kind]} nodes, {rounds}")
        ax.margins(y=0.15)
        ax.grid(axis="x", visible=False)
        ax.legend(loc="upper left", fontsize=8)
    _save(fig, path)


def server_soak(results: dict, path: str) -> None:
    """`dbt build` wall time and the server JVM's heap after a full collection, against the build number."""
    plt = _pyplot()
    fig, (time_ax, heap_ax) = plt.subplots(1, 2, figsize=(WIDTH, 3.0))
    for label, rows in results.items():
        builds = [r["build"] for r in rows]
        time_ax.plot(builds, [r["seconds"] for r in rows], label=label, linewidth=1)
        heap_ax.plot(builds, [r["heap_after_gc_mb"] for r in rows], label=label, linewidth=1)
    time_ax.set_xlabel("build")
    time_ax.set_ylabel("wall time of dbt build (s)")
    heap_ax.set_xlabel("build")
    heap_ax.set_ylabel("server heap after a full GC (MB)")
    for ax in (time_ax, heap_ax):
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", fontsize=8)
    _save(fig, path)


def merge_sweep(results: dict, path: str) -> None:
    """Merge time against the share of rows changed (keys scattered over every file), copy-on-write and
    with deletion vectors, with the full rebuild of the table as a horizontal line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH, 3.2))
    sweep = results["sweep"]  # [{"percent", "cow", "dv"}] in seconds
    pct = [p["percent"] for p in sweep]
    for key, label in (("cow", "merge, copy-on-write"), ("dv", "merge, deletion vectors")):
        points = [(p["percent"], p[key]) for p in sweep if p.get(key) is not None]
        if points:
            ax.plot(*zip(*points), marker="o", ms=4, lw=1.4, color=COLORS[key], label=label)
    rebuild = results["times"].get("rebuild")
    if rebuild:
        ax.axhline(rebuild, color=COLORS["rebuild"], ls="--", lw=1,
                   label=f"rebuild of the whole table ({rebuild:.1f} s)")
    ax.set_xscale("log")
    ax.set_xticks(pct, [f"{p:g} %" for p in pct])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_xlabel("rows changed (updated in place), keys scattered over every file")
    ax.set_ylabel("wall time (s)")
    runs = f", median of {results['repeat']} runs" if results.get("repeat", 1) > 1 else ""
    ax.set_title(f"MERGE into {results['rows']:,} rows × 11 columns in {results['files']} files{runs}")
    ax.legend(loc="upper left", fontsize=8)
    _save(fig, path)


PLOTS = {"realtime-latency": realtime_latency, "realtime-files": realtime_files, "dev-loop": dev_loop_builds,
         "merge-sweep": merge_sweep, "server-soak": server_soak}

if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in PLOTS:
        sys.exit(__doc__)
    with open(sys.argv[2]) as f:
        PLOTS[sys.argv[1]](json.load(f), sys.argv[3])
