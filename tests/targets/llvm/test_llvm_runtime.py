"""The C runtime's thread pool, driven from C so that nothing but the pool is timed or
raced: every iteration of a parallel loop runs exactly once, whatever the loop sizes
and the gaps between loops (workers spinning, or asleep, or the spin disabled), nested
loops and loops from several threads at once run correctly, workers really take part,
the pool works again in a forked child, and the caller does not wait for a worker that
never joined."""

from __future__ import annotations

import os
import subprocess

import pytest

from heterocc.targets.llvm import runtime

#: A driver of heterocc_parallel_for; exits non-zero (and says why) on any miscount.
DRIVER = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef void (*heterocc_task)(int64_t begin, int64_t end, void *closure);
int heterocc_parallel_for(heterocc_task task, void *closure, int64_t n);
int heterocc_num_threads(void);

#define MAX_N 512
typedef struct { int hits[MAX_N]; int nested; } Counts;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void busy(double seconds) { double end = now() + seconds; while (now() < end) {} }

static void count(int64_t begin, int64_t end, void *closure) {
    Counts *c = closure;
    for (int64_t i = begin; i < end; ++i) __atomic_add_fetch(&c->hits[i], 1, __ATOMIC_RELAXED);
}

/* Each iteration runs an inner parallel loop (run serially: nested regions). */
static void nested(int64_t begin, int64_t end, void *closure) {
    Counts *c = closure;
    for (int64_t i = begin; i < end; ++i) {
        Counts inner;
        memset(&inner, 0, sizeof inner);
        heterocc_parallel_for(count, &inner, 16);
        int ok = 1;
        for (int k = 0; k < 16; ++k) ok &= inner.hits[k] == 1;
        __atomic_add_fetch(&c->hits[i], ok, __ATOMIC_RELAXED);
    }
}

static int check(const char *what, Counts *c, int n) {
    for (int i = 0; i < n; ++i)
        if (c->hits[i] != 1) {
            fprintf(stderr, "%s: n=%d, iteration %d ran %d times\n", what, n, i, c->hits[i]);
            return 0;
        }
    return 1;
}

/* Many loops of every size, with gaps of none, a few microseconds (workers spinning)
   and a millisecond now and then (workers asleep when the spin is short). */
static int loops(const char *what, int rounds, unsigned seed) {
    Counts c;
    for (int r = 0; r < rounds; ++r) {
        int n = 1 + (int)(rand_r(&seed) % MAX_N);
        memset(&c, 0, sizeof c);
        heterocc_parallel_for(count, &c, n);
        if (!check(what, &c, n)) return 0;
        unsigned gap = rand_r(&seed) % 64;
        if (gap == 0) busy(1e-3);
        else if (gap < 8) busy(gap * 1e-6);
    }
    return 1;
}

static void *thread_loops(void *arg) {
    return (void *)(intptr_t)loops("concurrent", 2000, (unsigned)(intptr_t)arg);
}

/* The caller's first chunk waits until another thread has run a chunk: returns only if
   a worker joined the loop. */
static volatile int other_ran;
static pthread_t caller;
static void join_probe(int64_t begin, int64_t end, void *closure) {
    (void)end; (void)closure;
    if (!pthread_equal(pthread_self(), caller)) { other_ran = 1; return; }
    if (begin == 0) {
        double deadline = now() + 20;
        while (!other_ran && now() < deadline) {}
    }
}

int main(void) {
    int threads = heterocc_num_threads();
    if (!loops("loops", 20000, 1)) return 1;

    Counts c;
    memset(&c, 0, sizeof c);
    heterocc_parallel_for(nested, &c, 64);
    if (!check("nested", &c, 64)) return 1;

    pthread_t others[3];
    for (int t = 0; t < 3; ++t)
        pthread_create(&others[t], NULL, thread_loops, (void *)(intptr_t)(t + 7));
    int ok = loops("concurrent", 2000, 3);
    for (int t = 0; t < 3; ++t) {
        void *result;
        pthread_join(others[t], &result);
        ok &= result != NULL;
    }
    if (!ok) return 1;

    if (threads > 1) {
        caller = pthread_self();
        other_ran = 0;
        heterocc_parallel_for(join_probe, NULL, 64);
        if (!other_ran) { fprintf(stderr, "no worker joined a loop in 20 s\n"); return 1; }
    }

    pid_t child = fork();
    if (child == 0)
        _exit(loops("forked child", 2000, 5) && heterocc_num_threads() == threads ? 0 : 1);
    int status;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the forked child's loops failed\n");
        return 1;
    }
    if (!loops("after fork", 2000, 9)) return 1;
    printf("ok %d threads\n", threads);
    return 0;
}
"""


def _build(folder, name, source):
    (folder / f"{name}.c").write_text(source)
    runtime.write_runtime_source(folder)
    program = folder / name
    runtime.run_compiler(["-O2", "-pthread", str(folder / f"{name}.c"),
                          str(folder / "heterocc_runtime.c"), "-o", str(program)],
                         f"building the pool test program {name}")
    return program


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("pool"), "driver", DRIVER)


@pytest.mark.parametrize("threads,spin_us", [
    ("2", None),  # workers spin between loops (the default)
    ("2", "0"),  # workers sleep at once: every loop wakes them
    ("2", "3"),  # workers spin a little: some loops find them awake, some asleep
    ("5", None),  # more threads than CPUs here: nobody spins
])
def test_pool_runs_every_iteration_once(driver, threads, spin_us):
    env = {**os.environ, "HETEROCC_NUM_THREADS": threads}
    env.pop("HETEROCC_SPIN_US", None)
    if spin_us is not None:
        env["HETEROCC_SPIN_US"] = spin_us
    result = subprocess.run([str(driver)], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ok {threads} threads"


#: Counts the times the caller blocked over 2000 small loops (voluntary context switches).
BLOCKING = r"""
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>

typedef void (*heterocc_task)(int64_t begin, int64_t end, void *closure);
int heterocc_parallel_for(heterocc_task task, void *closure, int64_t n);

static void task(int64_t begin, int64_t end, void *closure) {
    volatile float *sink = closure;
    for (int64_t i = begin; i < end; ++i) sink[i] += 1.0f;
}

int main(void) {
    static float sink[64];
    heterocc_parallel_for(task, sink, 64);
    struct rusage before, after;
    getrusage(RUSAGE_THREAD, &before);
    for (int k = 0; k < 2000; ++k) heterocc_parallel_for(task, sink, 64);
    getrusage(RUSAGE_THREAD, &after);
    printf("%ld\n", after.ru_nvcsw - before.ru_nvcsw);
    return 0;
}
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_caller_does_not_wait_for_a_worker_that_did_not_join(tmp_path):
    """Two threads on one CPU, so the worker runs only when the caller is off it: the
    caller runs each small loop's chunks itself and goes on without blocking for the
    worker it woke (the pool it replaced blocked on every loop until the worker had
    checked in)."""
    program = _build(tmp_path, "blocking", BLOCKING)
    cpu = min(os.sched_getaffinity(0))
    env = {**os.environ, "HETEROCC_NUM_THREADS": "2", "HETEROCC_SPIN_US": "0"}
    result = subprocess.run([str(program)], env=env, capture_output=True, text=True,
                            timeout=120, preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) < 200  # of 2000 loops


#: Prints each loop's chunks as the pool ran them: "n: begin-end begin-end ...".
CHUNKS = r"""
#include <stdint.h>
#include <stdio.h>

typedef void (*heterocc_task)(int64_t begin, int64_t end, void *closure);
int heterocc_parallel_for(heterocc_task task, void *closure, int64_t n);

typedef struct { int count; int64_t begin[1024], end[1024]; } Chunks;

static void record(int64_t begin, int64_t end, void *closure) {
    Chunks *c = closure;
    int k = __atomic_fetch_add(&c->count, 1, __ATOMIC_RELAXED);
    c->begin[k] = begin;
    c->end[k] = end;
}

int main(void) {
    static const int64_t sizes[] = {2, 7, 12, 18, 25, 28, 35, 36, 60, 84, 252, 1000};
    for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; ++s) {
        Chunks c = {0};
        heterocc_parallel_for(record, &c, sizes[s]);
        printf("%lld:", (long long)sizes[s]);
        for (int k = 0; k < c.count; ++k)
            printf(" %lld-%lld", (long long)c.begin[k], (long long)c.end[k]);
        printf("\n");
    }
    return 0;
}
"""


@pytest.mark.parametrize("threads", [2, 3])
def test_each_thread_has_a_contiguous_share_cut_into_chunks_that_differ_by_one(tmp_path,
                                                                              threads):
    """The pool cuts a loop into one contiguous share a thread, the shares' lengths
    ``ceil`` or ``floor`` of ``n / threads`` (the longer first), each into
    ``TASKS_PER_CORE`` chunks (one an iteration in a shorter share) whose lengths differ
    by one at most, the longer first. A thread runs its own share's chunks before the
    others', so equally fast threads end within one iteration of each other: the
    busiest thread's share that the int8 schedules count (``pool_makespan``),
    ``ceil(n / threads)``."""
    from heterocc.targets.llvm.schedules.common import TASKS_PER_CORE
    from heterocc.targets.llvm.schedules.int8_conv import pool_makespan

    program = _build(tmp_path, "chunks", CHUNKS)
    env = {**os.environ, "HETEROCC_NUM_THREADS": str(threads)}
    result = subprocess.run([str(program)], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    for line in result.stdout.splitlines():
        n, chunks = line.split(":")
        n = int(n)
        spans = sorted(tuple(map(int, c.split("-"))) for c in chunks.split())
        assert [b for b, _ in spans] == [0] + [e for _, e in spans[:-1]] and spans[-1][1] == n
        assert len(spans) == min(n, TASKS_PER_CORE * threads)
        begin = 0
        for t in range(threads):
            share = n // threads + (t < n % threads)
            mine = [(b, e) for b, e in spans if begin <= b < begin + share]
            lengths = [e - b for b, e in mine]
            assert sum(lengths) == share and len(lengths) == min(share, TASKS_PER_CORE)
            if share:  # a loop shorter than the threads leaves the last ones none
                assert mine[-1][1] == begin + share
                assert lengths == sorted(lengths, reverse=True)
                assert lengths[0] - lengths[-1] <= 1
            begin += share
        assert pool_makespan(n, threads) == pytest.approx(-(-n // threads) * threads / n)


#: Prints, for each of 200 loops of 64 iterations (10 us each) on two threads, the first
#: iteration the caller ran and the first a worker ran (-1: none).
FIRST_CHUNKS = r"""
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

typedef void (*heterocc_task)(int64_t begin, int64_t end, void *closure);
int heterocc_parallel_for(heterocc_task task, void *closure, int64_t n);

typedef struct { pthread_t caller; int64_t caller_first, worker_first; } First;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void record(int64_t begin, int64_t end, void *closure) {
    First *f = closure;
    int64_t *first = pthread_equal(pthread_self(), f->caller) ? &f->caller_first
                                                              : &f->worker_first;
    int64_t none = -1;
    __atomic_compare_exchange_n(first, &none, begin, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    double until = now() + 10e-6 * (double)(end - begin);
    while (now() < until) {}
}

int main(void) {
    for (int k = 0; k < 200; ++k) {
        First f = {pthread_self(), -1, -1};
        heterocc_parallel_for(record, &f, 64);
        printf("%lld %lld\n", (long long)f.caller_first, (long long)f.worker_first);
    }
    return 0;
}
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 if hasattr(os, "sched_getaffinity")
                    else True, reason="needs two CPUs, so that the worker runs beside the caller")
def test_each_thread_runs_its_own_share_first(tmp_path):
    """The caller starts every loop at the start of its share, the first iteration, and
    a worker that joins in time at the start of its own, the second half: each thread
    runs the same part of every loop, so the data it wrote in one loop is in its own
    cache when it reads it in the next (on this machine's two virtual CPUs, placed at
    times on cores 400 ns apart a round trip, MobileNetV2 int8 ran 2x slower when the
    threads took chunks from one counter in turn)."""
    program = _build(tmp_path, "first_chunks", FIRST_CHUNKS)
    env = {**os.environ, "HETEROCC_NUM_THREADS": "2"}
    env.pop("HETEROCC_SPIN_US", None)
    result = subprocess.run([str(program)], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    firsts = [tuple(map(int, line.split())) for line in result.stdout.splitlines()]
    assert len(firsts) == 200
    assert all(caller == 0 for caller, _ in firsts)
    joined = [worker for _, worker in firsts if worker >= 0]
    assert len(joined) >= 20  # a spinning worker joins most loops, even on a busy machine
    assert sum(worker == 32 for worker in joined) >= 0.9 * len(joined)


#: Prints the pool's counts (loops, loops a worker ran on another CPU) after 300 loops
#: of 64 iterations, 100 nested loops of 8 (run inline, not the pool's) and 50 of one
#: iteration (run inline as well).
COUNTERS = r"""
#include <stdint.h>
#include <stdio.h>

typedef void (*heterocc_task)(int64_t begin, int64_t end, void *closure);
int heterocc_parallel_for(heterocc_task task, void *closure, int64_t n);
void heterocc_pool_counters(int64_t *counts);

static void task(int64_t begin, int64_t end, void *closure) {
    volatile float *sink = closure;
    for (int64_t i = begin; i < end; ++i)
        for (int k = 0; k < 2000; ++k) sink[i] += 1.0f;
}

static void nested(int64_t begin, int64_t end, void *closure) {
    for (int64_t i = begin; i < end; ++i) heterocc_parallel_for(task, closure, 8);
}

int main(void) {
    static float sink[64];
    for (int k = 0; k < 300; ++k) heterocc_parallel_for(task, sink, 64);
    heterocc_parallel_for(nested, sink, 100);
    for (int k = 0; k < 50; ++k) heterocc_parallel_for(task, sink, 1);
    int64_t counts[2];
    heterocc_pool_counters(counts);
    printf("%lld %lld\n", (long long)counts[0], (long long)counts[1]);
    return 0;
}
"""


@pytest.fixture(scope="module")
def counters(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("counters"), "counters", COUNTERS)


def _counts(program, threads, cpus=None):
    env = {**os.environ, "HETEROCC_NUM_THREADS": str(threads)}
    result = subprocess.run([str(program)], env=env, capture_output=True, text=True,
                            timeout=120,
                            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    assert result.returncode == 0, result.stderr
    return tuple(int(word) for word in result.stdout.split())


def test_the_pool_counts_its_loops_and_those_a_worker_shared_on_another_cpu(counters):
    """What a timing's watch reads (``pool_counters``): the loops handed to the pool
    (nested loops and loops of one iteration run inline: not counted; the outer loop
    is), and of those, the ones in which a worker ran iterations on another CPU."""
    loops, spread = _counts(counters, 2)
    assert loops == 300 + 1
    assert 0 <= spread <= loops
    assert _counts(counters, 1) == (0, 0)  # no pool: every loop runs on the caller


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_loops_whose_worker_shares_the_callers_cpu_are_not_counted_as_spread(counters):
    """Two threads held to one CPU: the worker joins some loops, but on the caller's
    CPU, where they ran no faster than on one thread."""
    loops, spread = _counts(counters, 2, {min(os.sched_getaffinity(0))})
    assert (loops, spread) == (301, 0)


#: Starts the pool on every CPU it may use, then holds the caller to the CPU given as
#: argument and runs loops until no worker may run there (5 s at most); prints, per
#: thread of the process, its CPUs allowed.
AVOIDANCE = r"""
#define _GNU_SOURCE
#include <dirent.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef void (*heterocc_task)(int64_t begin, int64_t end, void *closure);
int heterocc_parallel_for(heterocc_task task, void *closure, int64_t n);

static void task(int64_t begin, int64_t end, void *closure) {
    volatile float *sink = closure;
    for (int64_t i = begin; i < end; ++i)
        for (int k = 0; k < 20000; ++k) sink[i] += 1.0f;
}

/* Threads of this process other than the caller that may still run on `cpu`. */
static int workers_on(int cpu) {
    int count = 0;
    DIR *tasks = opendir("/proc/self/task");
    struct dirent *entry;
    while ((entry = readdir(tasks)) != NULL) {
        cpu_set_t set;
        if (entry->d_name[0] == '.' || atoi(entry->d_name) == getpid()) continue;
        if (sched_getaffinity(atoi(entry->d_name), sizeof set, &set) == 0)
            count += CPU_ISSET(cpu, &set) != 0;
    }
    closedir(tasks);
    return count;
}

int main(int argc, char **argv) {
    static float sink[64];
    heterocc_parallel_for(task, sink, 64);  /* the pool starts: workers on every CPU */
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(atoi(argv[1]), &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) return 2;
    /* loops until every worker has run since (each loop wakes the sleepers), 5 s at most */
    for (int k = 0; k < 500 && workers_on(atoi(argv[1])) > 0; ++k) {
        heterocc_parallel_for(task, sink, 64);
        struct timespec pause = {0, 10000000};
        nanosleep(&pause, NULL);
    }
    DIR *tasks = opendir("/proc/self/task");
    struct dirent *entry;
    while ((entry = readdir(tasks)) != NULL) {
        if (entry->d_name[0] == '.') continue;
        cpu_set_t set;
        if (sched_getaffinity(atoi(entry->d_name), sizeof set, &set) != 0) return 3;
        printf("%s", atoi(entry->d_name) == getpid() ? "caller" : "worker");
        for (int c = 0; c < CPU_SETSIZE; ++c) if (CPU_ISSET(c, &set)) printf(" %d", c);
        printf("\n");
    }
    closedir(tasks);
    return 0;
}
"""


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs to choose from")
def test_workers_keep_off_the_callers_cpu(tmp_path):
    """A worker on the caller's CPU runs only while the caller does not: each worker
    takes the CPUs it started with but the one the caller ran its last loop on (a guest
    kernel packing threads onto few virtual CPUs held it there for seconds)."""
    program = _build(tmp_path, "avoidance", AVOIDANCE)
    allowed = sorted(os.sched_getaffinity(0))
    caller = allowed[-1]
    env = {**os.environ, "HETEROCC_NUM_THREADS": "3"}
    result = subprocess.run([str(program), str(caller)], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = [line.split() for line in result.stdout.splitlines()]
    assert [cpus for kind, *cpus in lines if kind == "caller"] == [[str(caller)]]
    workers = [[int(c) for c in cpus] for kind, *cpus in lines if kind == "worker"]
    assert len(workers) == 2
    assert all(cpus == [c for c in allowed if c != caller] for cpus in workers)


def test_evicted_memory_keeps_its_values():
    """The eviction writes dirty lines back before it drops them: what a kernel wrote and
    a timing then evicted reads back unchanged, at any alignment and length."""
    import platform

    import numpy as np

    data = np.arange(1 << 18, dtype=np.float32)
    data[::7] *= -3.0  # dirty lines, written just before
    kept = data.copy()
    parts = [data, data[5:1000], data[:0], data.view(np.uint8)[3:70]]
    evicted = runtime.evict_from_caches(parts)
    assert evicted == (platform.machine().lower() in ("x86_64", "amd64", "aarch64", "arm64"))
    assert runtime.evicts_here() == evicted
    np.testing.assert_array_equal(data, kept)
    assert runtime.evict_from_caches([])  # nothing to evict is no failure
