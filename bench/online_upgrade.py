"""What an upgrade of a big jobs table costs the app writing to it: the writer's longest stall
(the longest time between two of its commits while the migration ran), its commits during the
migration, and the migration's own time. Online (the default: indexes built concurrently,
constraints added NOT VALID then validated) against the same migrations in one transaction
each (the plain CREATE INDEX of pgdrain before online migrations), on a fresh table per round,
rounds interleaved; medians.

    .venv/bin/python bench/online_upgrade.py --rows 1000000 --rounds 3
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test .venv/bin/python bench/online_upgrade.py

From version 0002 (the jobs table with nothing since) to the latest. The writer is an app of
the older version: plain INSERT and UPDATE, one job at a time (pgdrain_dev.online_upgrade).
"""

from __future__ import annotations

import argparse
import statistics

from pgdrain_dev.embedded import scratch_database
from pgdrain_dev.online_upgrade import UpgradeRun, prepare, upgrade_under_load

WAYS = {"online (default)": None, "in one transaction": 10**12}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--from-version", type=int, default=2)
    args = parser.parse_args()
    runs: dict[str, list[UpgradeRun]] = {way: [] for way in WAYS}
    for round_number in range(args.rounds):
        for way, above in WAYS.items():
            with scratch_database("pgdrain_upgrade") as url:
                prepare(url, rows=args.rows, from_version=args.from_version)
                run = upgrade_under_load(url, online_above_rows=above)
            if run.errors:
                raise SystemExit(f"{way}: the writer failed: {run.errors[0]}")
            runs[way].append(run)
            print(f"round {round_number + 1} {way}: longest stall {run.longest_stall:.3f} s, "
                  f"{run.writes_while_migrating} writes in {run.seconds:.1f} s "
                  f"({run.writes_during_builds} while an index was built)", flush=True)
    print(f"\n{args.rows:,} rows, from {args.from_version:04d}, medians of {args.rounds}:")
    print("| way | longest write stall | writes / s during the migration | migration |")
    print("|---|---|---|---|")
    for way, done in runs.items():
        stall = statistics.median(r.longest_stall for r in done)
        rate = statistics.median(r.writes_while_migrating / r.seconds for r in done)
        seconds = statistics.median(r.seconds for r in done)
        print(f"| {way} | {stall:.3f} s | {rate:,.0f} | {seconds:.1f} s |")


if __name__ == "__main__":
    main()
