#!/usr/bin/env python3
"""Where a warm ping's and a one-step execute's time goes: the pool bench's warm figures under
`perf`, split by process.

Usage: docker/profile-warm.py POOL_BENCH_EXE UNSTRIPPED_SUBAGENT [ROUNDS [EXECUTES]]

Runs `NEXBOT_BENCH_ONLY=warm` of the pool bench (the floor: a line echoed by an attached `cat`;
the same `cat` with no log driver, as the pool's containers run; a bare attached subagent's ping; the warm pool's ping; a one-step execute on a pool that never
recycles, its LLM a scripted server inside the bench's process) under `perf record -a -k mono` twice:
once sampling every CPU's clock (`cpu-clock`, 4 kHz, stacks unwound from DWARF: who is on
a CPU, in which function) and
once with the scheduler's switch and wake-up events (how often each process wakes per ping).
The bench prints each measured loop's stretch in CLOCK_MONOTONIC (`phase a..b`), which cuts
each figure's own samples out of the recording. Printed per figure: the CPU each process spent
per round trip (µs) and its wake-ups, then the busiest functions of the processes whose share
grew from the floor to the warm ping. No hardware counters are needed (this VM has none).

Why a script and not a bench: it needs root and `perf` (Debian's linux-perf), and its answer is
a breakdown to read, not a figure to track (`make bench` tracks the figures).
"""

import collections
import os
import re
import subprocess
import sys
import tempfile

FREQ = 4_000
TOP = 25
PHASE = re.compile(r"^(?P<name>.+?)\s{2,}.*phase (?P<start>[0-9.]+)\.\.(?P<end>[0-9.]+)$")
FIGURES = ("floor", "floor unlogged", "bare subagent", "warm pool", "execute")


def run_bench(exe, rounds, executes, perf_args, out):
    env = dict(os.environ, NEXBOT_BENCH_ONLY="warm", NEXBOT_BENCH_ROUNDS=str(rounds),
               NEXBOT_BENCH_EXECUTES=str(executes))
    cmd = ["perf", "record", "-q", "-a", "-k", "mono", "-o", out, *perf_args, "--", exe, "--bench"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"profile-warm: {' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    phases, lines = [], []
    for line in done.stdout.splitlines():
        m = PHASE.match(line.strip())
        if m:
            phases.append((float(m["start"]), float(m["end"])))
            lines.append(line.strip().split("  phase")[0])
    if len(phases) != len(FIGURES):
        sys.exit(f"profile-warm: expected {len(FIGURES)} phases in the bench's output:\n{done.stdout}")
    return phases, lines


def which(phases, t):
    for i, (start, end) in enumerate(phases):
        if start <= t <= end:
            return i
    return None


def process(comm):
    """A program's name from its main thread's: the subagent, the bench, busybox's `cat`."""
    if comm.startswith("nexbot-subagen"):
        return "subagent"
    if comm.startswith("pool-"):
        return "pool bench (host side)"
    if comm.startswith("containerd-shim"):
        return "containerd-shim"
    if comm in ("cat", "busybox"):
        return "cat"
    if comm.startswith("swapper"):
        return "idle"
    return comm


class Names:
    """Threads grouped by their process: tokio's and Go's workers carry other names than their
    process's main thread, whose name (tid = pid) is the group's."""

    def __init__(self):
        self.main = {}

    def see(self, comm, pid, tid):
        if pid == tid or pid not in self.main:
            self.main[pid] = process(comm) if pid != 0 else "idle"

    def of(self, pid):
        return self.main.get(pid, "?")


HEAD = re.compile(r"^\s*(?P<comm>\S.*?)\s+(?P<pid>\d+)/(?P<tid>\d+)\s+(?P<time>[0-9.]+):")
FRAME = re.compile(r"^\s+[0-9a-f]+\s+(?P<sym>.*?)\s+\((?P<dso>[^()]*)\)$")


def samples_of(data, symfs, fields):
    """Yields (comm, pid, tid, time, frames) of each sample; frames leaf first, as text."""
    cmd = ["perf", "script", "-i", data, "-F", fields, f"--symfs={symfs}",
           "--kallsyms=/proc/kallsyms"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    sample = None
    for line in out.splitlines():
        m = HEAD.match(line)
        if m:
            if sample:
                yield sample
            sample = (m["comm"], int(m["pid"]), int(m["tid"]), float(m["time"]), [])
            continue
        f = FRAME.match(line)
        if f and sample:
            dso = "kernel" if "kernel" in f["dso"] else os.path.basename(f["dso"])
            sym = re.sub(r"\+0x[0-9a-f]+$", "", f["sym"])
            sample[4].append(f"{sym} [{dso}]")
    if sample:
        yield sample


def cpu_split(data, phases, symfs):
    names = Names()
    samples = [collections.Counter() for _ in phases]
    leaf = [collections.defaultdict(collections.Counter) for _ in phases]
    inclusive = [collections.defaultdict(collections.Counter) for _ in phases]
    for comm, pid, tid, t, frames in samples_of(data, symfs, "comm,pid,tid,time,ip,sym,dso"):
        names.see(comm, pid, tid)
        i = which(phases, t)
        if i is None:
            continue
        who = names.of(pid)
        samples[i][who] += 1
        if frames:
            leaf[i][who][frames[0]] += 1
        for frame in set(frames):
            inclusive[i][who][frame] += 1
    return samples, leaf, inclusive


def switches_of(data, phases, symfs):
    names = Names()
    counts = [collections.Counter() for _ in phases]
    for comm, pid, tid, t, _ in samples_of(data, symfs, "comm,pid,tid,time"):
        names.see(comm, pid, tid)
        i = which(phases, t)
        if i is not None:
            counts[i][names.of(pid)] += 1
    return counts


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    exe, subagent = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5_000
    executes = int(sys.argv[4]) if len(sys.argv) > 4 else 1_000
    with tempfile.TemporaryDirectory(prefix="nexbot-profile-") as tmp:
        # The image's program is stripped; perf finds the unstripped one at its in-image path.
        symfs = os.path.join(tmp, "symfs")
        os.makedirs(os.path.join(symfs, "bin"))
        os.symlink(os.path.abspath(subagent), os.path.join(symfs, "bin", "nexbot-subagent"))
        for top in ("usr", "lib", "lib64", "work", "root", "tmp", "opt"):
            if os.path.exists("/" + top):
                os.symlink("/" + top, os.path.join(symfs, top))
        cpu_data = os.path.join(tmp, "cpu.data")
        phases, names = run_bench(exe, rounds, executes, ["-e", "cpu-clock", "-F", str(FREQ), "--call-graph", "dwarf,16384"], cpu_data)
        samples, leaf, inclusive = cpu_split(cpu_data, phases, symfs)
        sched_data = os.path.join(tmp, "sched.data")
        sched_phases, _ = run_bench(exe, rounds, executes, ["-e", "sched:sched_switch"], sched_data)
        switches = switches_of(sched_data, sched_phases, symfs)
    per_sample_us = 1e6 / FREQ
    print(f"per round trip ({rounds} pings, {executes} executes; CPU from {FREQ} Hz cpu-clock samples; "
          "switches: times a thread of it left a CPU)")
    count = [rounds, rounds, rounds, rounds, executes]
    for i, name in enumerate(names):
        rounds = count[i]
        wall_us = (phases[i][1] - phases[i][0]) * 1e6 / rounds
        print(f"\n{name}\n  wall per round trip {wall_us:8.1f} µs (mean)")
        for who, n in samples[i].most_common():
            cpu = n * per_sample_us / rounds
            if cpu < 0.5 and who != "idle":
                continue
            print(f"  {who:<28} CPU {cpu:7.1f} µs   switches {switches[i][who] / rounds:5.2f}")
    for i, what in ((3, "warm pool ping"), (4, "one-step execute")):
        print(f"\nbusiest functions, {what} (µs per round trip), of the processes that grew "
              "over the unlogged floor's run:")
        for who, n in samples[i].most_common():
            grown = n / count[i] - samples[1].get(who, 0) / count[1]
            if who == "idle" or grown * per_sample_us < 1.0:
                continue
            print(f"  {who} (+{grown * per_sample_us:.1f} µs): on the stack / at the leaf")
            for func, k in inclusive[i][who].most_common(TOP):
                at_leaf = leaf[i][who].get(func, 0)
                print(f"    {k * per_sample_us / count[i]:8.2f} / {at_leaf * per_sample_us / count[i]:6.2f}"
                      f"  {func[:110]}")


if __name__ == "__main__":
    main()
