#!/usr/bin/env python3
"""Runs `cargo bench -p dnsd --bench pipeline` N times and prints each case's median of the N
runs' mean ns per query; with --compare FILE, the ratio against an earlier run's file; with
--against EXE (the pipeline bench binary of another commit, e.g. built in a git worktree), both
binaries N times each, alternating, pinned to one CPU, and the ratio of the medians: the
fairest way to compare two commits on a shared machine (a slow spell hits both).

  python3 bench/scripts/pipeline_runs.py --runs 5 --out /tmp/before.json
  python3 bench/scripts/pipeline_runs.py --runs 5 --compare /tmp/before.json
  python3 bench/scripts/pipeline_runs.py --runs 5 --against /work/before-target/.../pipeline-HASH
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


def bench_exe():
    """Builds this commit's pipeline bench; its executable."""
    out = subprocess.run(["cargo", "bench", "-q", "-p", "dnsd", "--bench", "pipeline", "--no-run",
                          "--message-format", "json"], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    for line in out.stdout.splitlines():
        m = json.loads(line)
        if m.get("reason") == "compiler-artifact" and m.get("executable") and \
                m["target"]["name"] == "pipeline":
            return m["executable"]
    raise RuntimeError("no pipeline bench executable in cargo's output")


def exe_run(exe, crit):
    """One run of a bench executable pinned to CPU 1, its results under `crit`."""
    os.makedirs(crit, exist_ok=True)
    subprocess.run(["taskset", "-c", "1", exe, "--bench"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=dict(os.environ, CRITERION_HOME=crit))
    return read(crit)


def one_run(crit):
    subprocess.run(["cargo", "bench", "-q", "-p", "dnsd", "--bench", "pipeline"], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL)
    return read(crit)


def read(crit):
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
    ap.add_argument("--against", help="another commit's pipeline bench executable: run both, "
                    "alternating, and print the ratios")
    a = ap.parse_args()
    if a.against:
        return against(a)
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


def against(a):
    """Both executables `a.runs` times, alternating; medians and ratios (this one / other)."""
    import shutil
    import tempfile
    tmp = tempfile.mkdtemp(prefix="palisade-pipeline-")
    # Copied before this commit's bench is built: both commits' benches have one file name in
    # a shared target directory, and the build would overwrite the other one's.
    other = os.path.join(tmp, "other-pipeline")
    shutil.copy2(a.against, other)
    a.against = other
    mine = bench_exe()
    if open(mine, "rb").read() == open(other, "rb").read():
        print("warning: both executables are the same build", file=sys.stderr)
    runs = {"other": [], "this": []}
    for i in range(a.runs):
        for who, exe in (("other", a.against), ("this", mine)):
            print(f"pipeline bench run {i + 1}/{a.runs}: {who} ...", file=sys.stderr, flush=True)
            runs[who].append(exe_run(exe, os.path.join(tmp, f"{who}-{i}")))
    names = sorted(set().union(*runs["this"]) & set().union(*runs["other"]))
    med = {w: {n: statistics.median(r[n] for r in runs[w] if n in r) for n in names} for w in runs}
    print(f"{'case':42} {'other ns':>9} {'this ns':>9} {'ratio':>7}   this run by run / other")
    worst = 0.0
    for n in names:
        r = med["this"][n] / med["other"][n]
        worst = max(worst, r)
        pairs = " ".join(f"{t[n] / o[n]:.2f}" for t, o in zip(runs["this"], runs["other"]))
        print(f"{n:42} {med['other'][n]:9.1f} {med['this'][n]:9.1f} {r:6.3f}x   {pairs}")
    print(f"slowest case, this commit against the other: {worst:.3f}x (medians of {a.runs})")
    if a.out:
        json.dump(med, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
