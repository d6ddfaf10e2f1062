"""Plots of sustained runs: ``bench/sustained.py --csv`` files, one line each, side by side.

    .venv/bin/python -m pip install -r bench/requirements-plots.txt
    .venv/bin/python bench/plot_sustained.py --out docs/sustained.png \\
        "pgdrain, 15,000 jobs/s=run1.csv" "seed, 2,000 jobs/s=run2.csv"

Each argument is ``label=file``. Six panels against minutes into the run: jobs/s out (with
the offered rate as a dashed line of the same colour), enqueue -> start p99 (ms, log scale;
dotted, the claim statement's p99), the tables' heap + index size (MB), dead row versions,
WAL bytes a job and the server's CPU a job (µs). matplotlib is only needed here, so it
is not in the test requirements.
"""

from __future__ import annotations

import argparse
import csv


def read(path: str) -> dict[str, list[float | None]]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise SystemExit(f"{path}: no samples")
    return {column: [float(r[column]) if r[column] not in ("", "None") else None
                     for r in rows] for column in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="label=file.csv")
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--title", default="Sustained load")
    args = parser.parse_args()
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("needs matplotlib: pip install -r bench/requirements-plots.txt") \
            from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    figure, axes = plt.subplots(3, 2, figsize=(12, 10), sharex=True)
    (rate, latency), (size, dead), (wal, cpu) = axes
    for index, run in enumerate(args.runs):
        label, sep, path = run.rpartition("=")
        if not sep:
            raise SystemExit(f"{run!r}: expected label=file.csv")
        data, colour = read(path), f"C{index}"
        minutes = data["minute"]
        rate.plot(minutes, data["out_per_s"], color=colour, label=label)
        rate.plot(minutes, data["in_per_s"], color=colour, linestyle="--", linewidth=0.8)
        latency.plot(minutes, data["start_p99_ms"], color=colour, label=label)
        if "claim_call_p99_ms" in data:
            latency.plot(minutes, data["claim_call_p99_ms"], color=colour, linestyle=":",
                         linewidth=0.8)
        size.plot(minutes, [h + i for h, i in zip(data["heap_mb"], data["indexes_mb"],
                                                  strict=True)], color=colour, label=label)
        dead.plot(minutes, data["dead"], color=colour, label=label)
        wal.plot(minutes, data["wal_bytes_per_job"], color=colour, label=label)
        cpu.plot(minutes, data["server_cpu_us_per_job"], color=colour, label=label)
    rate.set_ylabel("jobs/s out (dashed: in)")
    latency.set_ylabel("enqueue -> start p99, ms\n(dotted: claim statement p99)")
    latency.set_yscale("log")
    latency.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    size.set_ylabel("tables: heap + indexes, MB")
    dead.set_ylabel("dead row versions")
    wal.set_ylabel("WAL bytes a job")
    cpu.set_ylabel("server CPU a job, µs")
    for axis in (wal, cpu):
        axis.set_xlabel("minutes")
    for axis in axes.flat:
        axis.grid(True, alpha=0.3)
    rate.legend(loc="lower right", fontsize="small")
    figure.suptitle(args.title)
    figure.tight_layout()
    figure.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
