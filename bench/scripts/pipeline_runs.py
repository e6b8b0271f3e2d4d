#!/usr/bin/env python3
"""Runs `cargo bench -p dnsd --bench pipeline` N times and prints each case's median of the N
runs' mean ns per query; with --compare FILE, the ratio against an earlier run's file.

  python3 bench/scripts/pipeline_runs.py --runs 5 --out /tmp/before.json
  python3 bench/scripts/pipeline_runs.py --runs 5 --compare /tmp/before.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def target_dir():
    meta = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(meta.stdout)["target_directory"]


def one_run(crit):
    subprocess.run(["cargo", "bench", "-q", "-p", "dnsd", "--bench", "pipeline"], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL)
    out = {}
    group = os.path.join(crit, "pipeline")
    for case in sorted(os.listdir(group)):
        est = os.path.join(group, case, "new", "estimates.json")
        bench = os.path.join(group, case, "new", "benchmark.json")
        if not os.path.exists(est):
            continue
        name = json.load(open(bench))["function_id"] if os.path.exists(bench) else case
        out[name] = json.load(open(est))["mean"]["point_estimate"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", help="write the medians (JSON) here")
    ap.add_argument("--compare", help="an earlier --out file: print ratios against it")
    a = ap.parse_args()
    crit = os.path.join(target_dir(), "criterion")
    runs = []
    for i in range(a.runs):
        print(f"pipeline bench run {i + 1}/{a.runs} ...", file=sys.stderr, flush=True)
        runs.append(one_run(crit))
    names = sorted(set().union(*runs))
    med = {n: statistics.median(r[n] for r in runs if n in r) for n in names}
    rng = {n: (min(r[n] for r in runs if n in r), max(r[n] for r in runs if n in r)) for n in names}
    before = json.load(open(a.compare)) if a.compare else {}
    print(f"{'case':42} {'median ns':>10} {'range':>17}" + ("  ratio" if before else ""))
    worst = 0.0
    for n in names:
        line = f"{n:42} {med[n]:10.1f} {rng[n][0]:8.1f}-{rng[n][1]:<8.1f}"
        if n in before:
            r = med[n] / before[n]
            worst = max(worst, r)
            line += f"  {r:.3f}x"
        print(line)
    if before:
        print(f"slowest case against the earlier run: {worst:.3f}x")
    if a.out:
        json.dump(med, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
