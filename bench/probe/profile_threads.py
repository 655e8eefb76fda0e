#!/usr/bin/env python3
"""Where the CPU of L1 goes, per thread (BENCHMARKS.md, "Where the cost goes"):
bench_debugger's reference MLP profiled with `perf record -e cpu-clock` (a software clock: it
works where the hardware counters are "not supported", on VMs), its samples bucketed by
thread and by what the code does, in ms of CPU per step.

Two runs of bench_debugger under perf, the same steps and threading: one with the variant
asked for (and the "no debugger" arm that bench_debugger always runs beside it), one with
"no debugger" only and twice the rounds. The training thread's samples of the second are
taken from the first's, category by category (the training thread and the program's other threads, OpenBLAS's
among them, each apart): start-up and one no-debugger arm cancel, the
other no-debugger arm is taken from the variant's, and what is left is what the variant added
to the training thread
(its capture, its kernel inline, its record building, and what it made the model's own code
slower by: cache and allocator effects show in "model"). The library's own threads
(precprobe-stats, precprobe-write) exist only in the first run. Start-up (dynamic linking,
operator registration, bench_debugger's memcpy bandwidth probe) is in both runs and cancels.

    bench/probe/profile_threads.py --h 256 --threads free-core [--variant "L1 statistics (async)"]
        [--steps 30 --rounds 3 --warmup 5 --freq 1999 --bench build/bin/bench_debugger]

Prints one Markdown table: rows are categories, columns the threads and their sum. Noise:
a category's figure moves by about sqrt(samples) / freq / steps; the footer says how many
samples each column holds.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

# (category, dso pattern or None, symbol pattern), first match wins. Symbols are demangled.
RULES = [
    ("compression (zstd, digests)", r"libzstd|libxxhash", None),
    ("compression (zstd, digests)", None, r"^(ZSTD_|HUF_|FSE_|XXH)"),
    ("op watch", None, r"OpWatcher|ModuleAttributor|Ring::"),
    ("encoding (JSON text or binary records)", None,
     r"append_json|append_args|append_tensor|append_range|TextOut|json::|format_int|"
     r"dragonbox|to_chars|fmt::|FrameStream|encode|BinaryOpEncoder|put_varint|put_entry|"
     r"canonical_value"),
    ("statistics kernel", None,
     r"block_stats|summar|stats_span|grad_stats|weight_update|reduce_|Stats::|"
     r"fold_|finite_|accumulate"),
    ("capture (RecordFunction, observer, cache keys)", None,
     r"RecordFunction|precprobe.*(capture|Capture|observer|Observer|on_enter|on_exit|"
     r"callback|fingerprint|StepCache|claim)|ThreadLocalState|ThreadLocalDebugInfo|"
     r"c10::IValue|torch::jit::Stack|at::impl::.*[Rr]ecord"),
    ("hand-offs (queues, wakes, yields)", None,
     r"sched_yield|futex|pthread_cond|pthread_mutex|__schedule|finish_task_switch|"
     r"clock_gettime|nanosleep|worker_main|writer_main|Queue|queue|condition_variable|"
     r"try_lock|__lll_|schedule_hrtimeout|do_sched_yield|_raw_spin_unlock_irq"),
    ("allocation (malloc, free)", None,
     r"^(malloc|free|cfree|_int_malloc|_int_free|malloc_consolidate|unlink_chunk|"
     r"operator new|operator delete|__libc_malloc|__libc_free|tcache|realloc|_int_realloc)"),
    ("record building (names, strings, records)", None, r"precprobe::|std::__cxx11::basic_string"),
    ("OS (page faults, syscalls)", r"kernel\.kallsyms", None),
]
OTHER = "model and everything else (ATen, BLAS, autograd)"
CATEGORIES = []
for c, _, _ in RULES + [(OTHER, None, None)]:
    if c not in CATEGORIES:
        CATEGORIES.append(c)
COMPILED = [(c, re.compile(d) if d else None, re.compile(s) if s else None) for c, d, s in RULES]
THREADS = ["training thread", "other program threads", "precprobe-stats", "precprobe-write"]
PROGRAM = ("training thread", "other program threads")  # both runs have them


def category(dso, sym):
    for c, d, s in COMPILED:
        if (d is None or d.search(dso)) and (s is None or s.search(sym)):
            return c
    return OTHER


def profile(args, only, out, rounds):
    cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(args.freq), "-o", out, "--",
           args.bench, "--h", str(args.h), "--steps", str(args.steps), "--rounds",
           str(rounds), "--warmup", str(args.warmup), "--threads", args.threads,
           "--only", only]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"profile_threads: {' '.join(cmd)} failed:\n{run.stderr}")
    lines = [l for l in run.stdout.splitlines() if l.strip().startswith(("no debugger", only))]
    script = subprocess.run(["perf", "script", "-i", out, "-F", "comm,pid,tid,ip,sym,dso"],
                            capture_output=True, text=True).stdout
    counts = collections.Counter()
    for line in script.splitlines():
        m = re.match(r"\s*(\S+)\s+(\d+)/(\d+)\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
        if not m:
            continue
        comm, pid, tid, sym, dso = m.groups()
        if comm.startswith("precprobe-"):
            thread = comm
        else:  # OpenBLAS's and ATen's pool threads apart from the one that trains
            thread = "training thread" if pid == tid else "other program threads"
        if thread not in THREADS:  # precprobe-crash and the like: counted with the rest
            THREADS.append(thread)
        counts[(thread, category(dso, sym))] += 1
    return counts, lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--h", type=int, default=256)
    p.add_argument("--threads", default="free-core", choices=["free-core", "default"])
    p.add_argument("--variant", default="L1 statistics (async)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--freq", type=int, default=1999)
    p.add_argument("--bench", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                   "build", "bin", "bench_debugger"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        with_v, lines = profile(args, args.variant, os.path.join(d, "variant.data"), args.rounds)
        base, _ = profile(args, "no debugger", os.path.join(d, "base.data"), 2 * args.rounds)
    steps = args.rounds * (args.warmup + args.steps)  # steps the variant ran
    ms = lambda n: 1000.0 * n / args.freq / steps
    print(f"bench_debugger --h {args.h} --threads {args.threads}, {args.variant}: "
          f"{args.rounds} rounds x ({args.warmup} + {args.steps}) steps, perf cpu-clock at "
          f"{args.freq} Hz")
    for l in lines:
        print("   ", l.strip())
    print()
    print("| ms of CPU per step | " + " | ".join(THREADS) + " | all threads |")
    print("|---|" + "---|" * (len(THREADS) + 1))
    totals = collections.Counter()
    for c in CATEGORIES:
        row = []
        for t in THREADS:
            n = with_v[(t, c)] - (base[(t, c)] if t in PROGRAM else 0)
            totals[t] += n
            row.append(n)
        if all(n == 0 for n in row):
            continue
        print(f"| {c} | " + " | ".join(f"{ms(n):+.2f}" if THREADS[i] in PROGRAM
                                        else f"{ms(n):.2f}" for i, n in enumerate(row)) +
              f" | {ms(sum(row)):+.2f} |")
    print("| **added by the variant** | " +
          " | ".join(f"**{ms(totals[t]):.2f}**" for t in THREADS) +
          f" | **{ms(sum(totals.values())):.2f}** |")
    print(f"\nSamples: training thread {sum(n for (t, _), n in with_v.items() if t == THREADS[0])}"
          f" with the variant, {sum(n for (t, _), n in base.items() if t == THREADS[0])} in the "
          "run of twice the no-debugger arm; " +
          ", ".join(f"{t} {sum(n for (u, _), n in with_v.items() if u == t)}" for t in THREADS[2:]) +
          ". The bench's own lines above give the no-debugger step for scale.")


if __name__ == "__main__":
    main()
