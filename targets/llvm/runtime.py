"""The C runtime that generated code calls: a persistent pthread pool running the
iterations of parallel loops across cores.

Generated code calls ``heterocc_parallel_for(task, closure, n)``; the pool splits
``[0, n)`` into one contiguous share a thread (the caller's first, their lengths
differing by one iteration at most), each cut into a few chunks, and each thread runs
the chunks of its own share as ``task(begin, end, closure)``, then takes those left in
the others' shares: equally fast threads end within one iteration of each other, a
thread slowed down by another process simply runs fewer chunks, and a thread runs the
same part of every loop. Nested or concurrent
parallel regions run serially in the calling thread, so the pool never deadlocks. The
pool is rebuilt after fork(). The thread count is ``HETEROCC_NUM_THREADS`` or the CPUs
this process may run on.

A network runs many small parallel loops back to back, with a little Python between
them, so the cost of handing a loop to the workers matters as much as the loop:

- A worker joins a loop only while it is open, and the caller waits only for the
  workers that joined. The caller opens the loop, runs chunks itself, closes it once
  every chunk is taken and waits for those who joined to finish theirs: a worker that is
  asleep, or whose core another process holds, costs the caller nothing (its chunks are
  run by the others) instead of a wake-up latency or a scheduler time slice.
- A worker that finished its chunks spins on the loop counter for a while (``pause``
  between reads, yielding its core to any other runnable thread every few microseconds)
  before it sleeps on a condition variable, so the next loop, a kernel later, finds it
  awake; the caller wakes sleepers (a futex call) only when there are some. The spin
  lasts ``HETEROCC_SPIN_US`` microseconds, read when the pool starts (default
  :data:`DEFAULT_SPIN_US`; 0: sleep at once); when the pool has more threads than the
  CPUs it may run on, nobody spins, and when a spinning thread finds it was off its core
  for half a millisecond or more
  (the machine is loaded: spinning would only burn the process's share and leave the
  thread runnable instead of asleep, so it would get its core back after the others'
  time slices rather than when woken), nobody spins for the next 50 ms.
- Taking a chunk of one's own share touches no cache line another thread uses; what
  threads on different cores write while a loop runs (the loop's state, the count of
  workers done) sits in lines apart from what they only read. A line that one core
  writes and the other reads crosses between them each time, which costs 100 ns a round
  trip between cores that share a cache and 400 ns between cores that do not: this
  2-core virtual machine's CPUs were placed either way for seconds at a time, and
  MobileNetV2 int8 on two threads ran 0.79 ms near and 1.50 ms far with one counter
  that every chunk was taken from, 0.79 and 1.43 with a share a thread (ResNet-18 int8:
  2.35 and 3.07 ms against 2.37 and 2.92).
- A worker keeps off the CPU the caller ran its last loop on (its affinity: the CPUs
  it started with but that one), so that no scheduler can hold it where it runs only
  while the caller does not. The pool counts the loops in which a worker ran chunks on
  another CPU than the caller's (``heterocc_pool_counters``, :func:`pool_counters`):
  what a timing reads to tell a sample of the code from one of where its threads ran.

The source is compiled once per machine with the system C compiler into a cache
folder, loaded into the process for the JIT, and linked into exported libraries.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import llvmlite.binding as llvm

from heterocc.sdk import CompileError

#: microseconds a worker spins for the next parallel loop before sleeping (and the caller
#: for the workers finishing theirs), unless ``HETEROCC_SPIN_US`` says otherwise: longer
#: than the Python between two kernels of a network, short enough that an idle model
#: leaves the cores at once.
DEFAULT_SPIN_US = 200

RUNTIME_SOURCE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef void (*heterocc_task)(int64_t begin, int64_t end, void *closure);

/* The loop state, one word changed atomically: the loop's generation (high 32 bits),
   CLOSED (set once every chunk is taken: nobody may join any more) and the number of
   workers that joined (low bits). A worker joins by incrementing it while it is open
   and of a generation it has not seen. */
#define CLOSED ((uint64_t)1 << 31)
#define JOINED_MASK (CLOSED - 1)
#define GENERATION(state) ((uint32_t)((state) >> 32))

static pthread_mutex_t region_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t sleep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_ready = PTHREAD_COND_INITIALIZER;
static pthread_cond_t work_done = PTHREAD_COND_INITIALIZER;
static int pool_threads = 0;
static int fork_handler_installed = 0;
static int64_t spin_ns = 0;
static int64_t spin_paused_until = 0;  /* no spinning before this time (a loaded machine) */
/* What threads on different cores write while a loop runs sits in cache lines of its
   own, apart from what they only read: a line written by one core and read by the
   other crosses between them on every change, which costs 100 ns a round trip between
   two cores sharing a cache and 400 ns between cores that do not (this 2-core virtual
   machine's CPUs were placed either way, for seconds at a time). */
#define LINE 64
static uint64_t loop_state __attribute__((aligned(LINE))) = CLOSED;
static int finished_workers __attribute__((aligned(LINE))) = 0;  /* joined workers done */
static int sleeping_workers __attribute__((aligned(LINE))) = 0;  /* waiting on work_ready */
static int caller_sleeping = 0;   /* the caller waits on work_done */
/* The open loop, written by its caller before it opens it and only read while open. */
static struct {
    heterocc_task task;
    void *closure;
} job __attribute__((aligned(LINE)));
/* A thread's share of the open loop: `chunks` chunks of its `length` iterations from
   `begin`; `next` the next chunk not yet taken, by the thread or by another done with
   its own. Each share in a line of its own: taking a chunk of one's own share touches
   no line another thread uses. */
typedef struct {
    int next;
    int chunks;
    int64_t begin;
    int64_t length;
} __attribute__((aligned(LINE))) Share;
static Share *shares;  /* one a pool thread, allocated when the pool starts */
static __thread int inside_region = 0;
static __thread int my_share = 0;  /* a worker's share (1, 2, ...); a caller's is 0 */
/* What the pool counts (heterocc_pool_counters): loops handed to the pool, and those in
   which a worker ran chunks on another CPU than the caller's. A loop that no worker
   joined, or whose worker shared the caller's CPU, ran at one thread's speed: a worker
   asleep too long, or a scheduler that put it on the caller's core. */
static int caller_cpu = -1;
static int loop_spread = 0;
static int64_t pooled_loops = 0;
static int64_t spread_loops = 0;

/* Chunks per thread: enough to even out threads slowed by other processes, few
   enough to keep each chunk's data contiguous. */
#define CHUNKS_PER_THREAD 4
/* Pauses between two looks at the clock while spinning, and looks at the clock
   between two offers of the core to another runnable thread (sched_yield). */
#define PAUSES_PER_CLOCK 32
#define CLOCKS_PER_YIELD 4
/* A gap this long between two looks at the clock means the spinning thread was off its
   core (preempted, or its yield was taken): the machine is loaded. Then nobody spins
   for SPIN_PAUSE_NS: a thread that spins on a loaded machine burns its process's
   share and is runnable rather than asleep, so it gets its core back only after the
   others' time slices, while a sleeper is woken promptly when a loop comes.
   The gap is a tenth of a time slice, not less: on a virtual machine the hypervisor and
   interrupts take a core away for tens of microseconds many times a second on an idle
   host, and a 50 us threshold paused the spin so often that a network of small kernels
   ran on one thread most of the time (MobileNetV2 median 5.7 ms instead of 3.7). */
#define PREEMPTED_NS 500000
#define SPIN_PAUSE_NS 50000000

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

static int64_t clock_ns(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

/* Spin until done(word, value), for at most spin_ns and while the thread keeps its
   core; returns whether it came true. */
static inline int spin(int (*done)(const void *, uint64_t), const void *word, uint64_t value) {
    if (spin_ns <= 0) return 0;
    int64_t last = now_ns(), deadline = last + spin_ns;
    if (last < __atomic_load_n(&spin_paused_until, __ATOMIC_RELAXED)) return 0;
    for (unsigned looks = 1;; ++looks) {
        for (int i = 0; i < PAUSES_PER_CLOCK; ++i) {
            if (done(word, value)) return 1;
            cpu_relax();
        }
        int64_t time = now_ns();
        if (time - last > PREEMPTED_NS) {  /* it was off its core: the machine is loaded */
            __atomic_store_n(&spin_paused_until, time + SPIN_PAUSE_NS, __ATOMIC_RELAXED);
            return done(word, value);
        }
        if (time > deadline) return done(word, value);
        last = time;
        if (looks % CLOCKS_PER_YIELD == 0) sched_yield();
    }
}

static int generation_differs(const void *state, uint64_t seen) {
    return GENERATION(__atomic_load_n((const uint64_t *)state, __ATOMIC_ACQUIRE)) != seen;
}

static int count_reaches(const void *count, uint64_t value) {
    return __atomic_load_n((const int *)count, __ATOMIC_ACQUIRE) == (int)value;
}

/* Cut a loop of n iterations into one share a thread, contiguous, the first
   (n % threads) shares one iteration longer (36 iterations on two threads: 18 and 18),
   each share into CHUNKS_PER_THREAD chunks (one an iteration in a shorter share), the
   longer first (18: 5, 5, 4, 4). Each thread runs the chunks of its own share first:
   equally fast threads end within one iteration of each other, and a thread runs the
   same part of every loop, so a loop that reads what the one before it wrote, split
   the same way, finds it in its own cache. Then it takes the chunks left in the
   others' shares, so a thread that is late, asleep or slowed by another process holds
   up nobody. */
static void cut_shares(int64_t n, int threads) {
    int64_t size = n / threads, longer = n % threads, begin = 0;
    for (int t = 0; t < threads; ++t) {
        int64_t length = size + (t < longer);
        shares[t].begin = begin;
        shares[t].length = length;
        shares[t].chunks = (int)(length < CHUNKS_PER_THREAD ? length : CHUNKS_PER_THREAD);
        __atomic_store_n(&shares[t].next, 0, __ATOMIC_RELAXED);
        begin += length;
    }
}

/* Run chunks of the open loop until none is left: those of share `mine` first, then
   the others' in turn. Returns the chunks run. */
static int run_chunks(int mine) {
    int ran = 0, count = pool_threads;
    for (int k = 0; k < count; ++k) {
        Share *share = &shares[(mine + k) % count];
        int64_t size = share->length / (share->chunks ? share->chunks : 1);
        int64_t longer = share->length - size * share->chunks;
        for (;;) {
            int chunk = __atomic_fetch_add(&share->next, 1, __ATOMIC_RELAXED);
            if (chunk >= share->chunks) break;
            int64_t begin = share->begin + size * chunk + (chunk < longer ? chunk : longer);
            job.task(begin, begin + size + (chunk < longer), job.closure);
            ++ran;
        }
    }
    return ran;
}

/* Until the loop state's generation differs from `seen`: spin, then sleep. The
   sleeper count and the caller's store of a new state are both sequentially
   consistent, so either the caller sees the sleeper (and wakes it under the lock) or
   the sleeper sees the new state. */
static void wait_for_loop(uint32_t seen) {
    if (spin(generation_differs, &loop_state, seen)) return;
    pthread_mutex_lock(&sleep_lock);
    __atomic_add_fetch(&sleeping_workers, 1, __ATOMIC_SEQ_CST);
    while (GENERATION(__atomic_load_n(&loop_state, __ATOMIC_SEQ_CST)) == seen)
        pthread_cond_wait(&work_ready, &sleep_lock);
    __atomic_sub_fetch(&sleeping_workers, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&sleep_lock);
}

/* The CPUs a worker may run on (its creator's, when the pool started; at least two,
   or it keeps off none), and the one it keeps off: the caller's, as of the last loop
   the caller opened. */
static __thread cpu_set_t worker_cpus;
static __thread int avoided_cpu = -1;

/* Keep this worker off the caller's CPU: a worker there runs only when the caller does
   not, so it joins no loop, or joins on the caller's core and adds nothing. A scheduler
   may well put it there: a guest kernel that packs threads onto few busy virtual CPUs
   (sparing the host an idle one's wake-up) held the worker on the caller's CPU, the
   other CPU idle, for whole seconds: 29-60% of MobileNetV2's runs at one thread's
   speed. A system call only when the caller's CPU changed. */
static void avoid_caller_cpu(void) {
    int cpu = __atomic_load_n(&caller_cpu, __ATOMIC_RELAXED);
    if (cpu < 0 || cpu == avoided_cpu) return;
    avoided_cpu = cpu;
    cpu_set_t others = worker_cpus;
    CPU_CLR(cpu, &others);
    sched_setaffinity(0, sizeof others, &others);
}

typedef struct { uint32_t generation; int share; } WorkerStart;

static void *worker_main(void *arg) {
    WorkerStart *start = arg;
    uint32_t seen = start->generation;
    my_share = start->share;
    free(start);
    inside_region = 1;
    int keeps_off = sched_getaffinity(0, sizeof worker_cpus, &worker_cpus) == 0
                    && CPU_COUNT(&worker_cpus) > 1;
    for (;;) {
        if (keeps_off) avoid_caller_cpu();
        uint64_t state = __atomic_load_n(&loop_state, __ATOMIC_ACQUIRE);
        if (GENERATION(state) == seen) {
            wait_for_loop(seen);
            continue;
        }
        if (state & CLOSED) {  /* missed that loop: the others ran its chunks */
            seen = GENERATION(state);
            continue;
        }
        if (!__atomic_compare_exchange_n(&loop_state, &state, state + 1, 0,
                                         __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE))
            continue;  /* another worker joined, or the caller closed it: look again */
        seen = GENERATION(state);
        if (run_chunks(my_share) > 0
                && sched_getcpu() != __atomic_load_n(&caller_cpu, __ATOMIC_RELAXED))
            __atomic_store_n(&loop_spread, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&finished_workers, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&caller_sleeping, __ATOMIC_SEQ_CST)) {
            pthread_mutex_lock(&sleep_lock);
            pthread_cond_signal(&work_done);
            pthread_mutex_unlock(&sleep_lock);
        }
    }
    return NULL;
}

static int allowed_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static int wanted_threads(void) {
    const char *env = getenv("HETEROCC_NUM_THREADS");
    if (env && atoi(env) > 0) return atoi(env);
    return allowed_cpus();
}

static int64_t wanted_spin_ns(int threads) {
    if (threads > allowed_cpus()) return 0;  /* a spinning thread would hold a core another needs */
    const char *env = getenv("HETEROCC_SPIN_US");
    long us = env && *env ? atol(env) : HETEROCC_DEFAULT_SPIN_US;
    return us > 0 ? (int64_t)us * 1000 : 0;
}

/* A forked child has none of the workers; it starts a fresh pool on first use. */
static void reset_after_fork(void) {
    pthread_mutex_init(&region_lock, NULL);
    pthread_mutex_init(&sleep_lock, NULL);
    pthread_cond_init(&work_ready, NULL);
    pthread_cond_init(&work_done, NULL);
    pool_threads = 0;
    loop_state = CLOSED;
    spin_paused_until = 0;
    finished_workers = 0;
    sleeping_workers = 0;
    caller_sleeping = 0;
    inside_region = 0;
    caller_cpu = -1;
    loop_spread = 0;
    pooled_loops = 0;
    spread_loops = 0;
}

/* Called with region_lock held and no loop open. */
static void start_pool(void) {
    if (!fork_handler_installed) {
        pthread_atfork(NULL, NULL, reset_after_fork);
        fork_handler_installed = 1;
    }
    int wanted = wanted_threads();
    free(shares);  /* a forked child's copy of its parent's, if any */
    shares = aligned_alloc(LINE, (size_t)wanted * sizeof(Share));
    if (shares == NULL) {  /* no room for the shares: the caller runs every loop alone */
        pool_threads = 1;
        return;
    }
    spin_ns = wanted_spin_ns(wanted);
    uint64_t state = __atomic_load_n(&loop_state, __ATOMIC_RELAXED);
    int started = 1;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 16u << 20);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (int t = 1; t < wanted; ++t) {
        pthread_t thread;
        WorkerStart *start = malloc(sizeof *start);
        if (start == NULL) break;
        start->generation = GENERATION(state);
        start->share = started;
        if (pthread_create(&thread, &attr, worker_main, start) != 0) {
            free(start);
            break;
        }
        ++started;
    }
    pthread_attr_destroy(&attr);
    pool_threads = started;
}

int heterocc_num_threads(void) {
    pthread_mutex_lock(&region_lock);
    if (pool_threads == 0) start_pool();
    int n = pool_threads;
    pthread_mutex_unlock(&region_lock);
    return n;
}

int heterocc_parallel_for(heterocc_task task, void *closure, int64_t n) {
    if (n <= 0) return 0;
    if (inside_region || n == 1 || pthread_mutex_trylock(&region_lock) != 0) {
        task(0, n, closure);
        return 0;
    }
    if (pool_threads == 0) start_pool();
    if (pool_threads == 1) {
        pthread_mutex_unlock(&region_lock);
        task(0, n, closure);
        return 0;
    }
    /* No worker reads these now: the last loop is closed and its joiners finished. */
    job.task = task;
    job.closure = closure;
    cut_shares(n, pool_threads);
    __atomic_store_n(&finished_workers, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&loop_spread, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&caller_cpu, sched_getcpu(), __ATOMIC_RELAXED);
    uint32_t generation = GENERATION(__atomic_load_n(&loop_state, __ATOMIC_RELAXED)) + 1;
    __atomic_store_n(&loop_state, (uint64_t)generation << 32, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&sleeping_workers, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&sleep_lock);
        pthread_cond_broadcast(&work_ready);
        pthread_mutex_unlock(&sleep_lock);
    }
    inside_region = 1;
    run_chunks(0);
    inside_region = 0;
    /* Every chunk is taken: close the loop and wait for the workers that joined. */
    int joined = (int)(__atomic_fetch_or(&loop_state, CLOSED, __ATOMIC_SEQ_CST) & JOINED_MASK);
    if (!spin(count_reaches, &finished_workers, (uint64_t)joined)) {
        pthread_mutex_lock(&sleep_lock);
        __atomic_store_n(&caller_sleeping, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&finished_workers, __ATOMIC_SEQ_CST) != joined)
            pthread_cond_wait(&work_done, &sleep_lock);
        __atomic_store_n(&caller_sleeping, 0, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&sleep_lock);
    }
    __atomic_store_n(&pooled_loops, pooled_loops + 1, __ATOMIC_RELAXED);
    if (__atomic_load_n(&loop_spread, __ATOMIC_RELAXED))
        __atomic_store_n(&spread_loops, spread_loops + 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&region_lock);
    return 0;
}

/* The pool's counts so far: counts[0] loops handed to the pool, counts[1] those in
   which a worker ran chunks on another CPU than the caller's (read without the lock:
   a count may lag a loop). */
void heterocc_pool_counters(int64_t *counts) {
    counts[0] = __atomic_load_n(&pooled_loops, __ATOMIC_RELAXED);
    counts[1] = __atomic_load_n(&spread_loops, __ATOMIC_RELAXED);
}

/* Writes back and evicts the cache lines of [data, data + bytes) from every level of
   every core's caches (what a timing does to a kernel's weights before a call: in a
   network the kernel finds them where a whole run of the others left them). 1 where
   this CPU has such an instruction for user code (x86's clflush, AArch64's dc civac),
   0 where it evicted nothing. */
int heterocc_evict(const void *data, int64_t bytes) {
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
    const char *line = (const char *)((uintptr_t)data & ~(uintptr_t)(LINE - 1));
    const char *end = (const char *)data + bytes;
    for (; line < end; line += LINE) {
#if defined(__aarch64__)
        __asm__ volatile("dc civac, %0" : : "r"(line) : "memory");
#else  /* inline assembly: no compiler flag for the instruction set is needed */
        __asm__ volatile("clflush (%0)" : : "r"(line) : "memory");
#endif
    }
#if defined(__aarch64__)
    __asm__ volatile("dsb ish" : : : "memory");
#else
    __asm__ volatile("mfence" : : : "memory");
#endif
    return 1;
#else
    (void)data;
    (void)bytes;
    return 0;
#endif
}
"""

#: the most parameters a kernel may have to be called by :data:`RUN_SEQUENCE` (kernels
#: with more are called one by one from Python)
SEQUENCE_MAX_ARGS = 64


def _sequence_source(max_args: int) -> str:
    """The C of ``heterocc_run_sequence``: kernels called one after another, each with its
    data pointers gathered from a table of values; one ``case`` per parameter count, since
    C calls a function pointer only through a prototype of its own arity."""
    cases = []
    for n in range(max_args + 1):
        params = ", ".join(["void *"] * n) or "void"
        args = ", ".join(f"a[{k}]" for k in range(n))
        cases.append(f"        case {n}: ((void (*)({params}))functions[c])({args}); break;")
    return r"""
/* A run of consecutive kernels of a network in one call from Python: call c gets
   arities[c] data pointers, values[arguments[...]] in order (the table holds the run's
   inputs, outputs, constants and the buffers of its own intermediate tensors). With
   `times`, call c's start and end on `clock` (ns) go to times[2c], times[2c+1] (a
   profile). Returns 0, or 1 + the index of a call whose arity has no case (nothing
   from it on was run). */
static int run_sequence(int64_t calls, void *const *functions, const int32_t *arities,
                        const int32_t *arguments, void *const *values, int64_t *times,
                        clockid_t clock) {
    void *a[HETEROCC_SEQUENCE_MAX_ARGS + 1];
    for (int64_t c = 0; c < calls; ++c) {
        int n = arities[c];
        if (n < 0 || n > HETEROCC_SEQUENCE_MAX_ARGS) return (int)c + 1;
        for (int k = 0; k < n; ++k) a[k] = values[arguments[k]];
        arguments += n;
        if (times) times[2 * c] = clock_ns(clock);
        switch (n) {
""" + "\n".join(cases) + r"""
        default: return (int)c + 1;
        }
        if (times) times[2 * c + 1] = clock_ns(clock);
    }
    return 0;
}

int heterocc_run_sequence(int64_t calls, void *const *functions, const int32_t *arities,
                          const int32_t *arguments, void *const *values) {
    return run_sequence(calls, functions, arities, arguments, values, NULL, CLOCK_MONOTONIC);
}

int heterocc_run_sequence_timed(int64_t calls, void *const *functions,
                                const int32_t *arities, const int32_t *arguments,
                                void *const *values, int64_t *times) {
    return run_sequence(calls, functions, arities, arguments, values, times, CLOCK_MONOTONIC);
}

/* As heterocc_run_sequence_timed, on the calling thread's CPU clock: the CPU time of
   each kernel, which other processes taking the core do not inflate (a kernel's worker
   threads are not counted: a figure for one thread). */
int heterocc_run_sequence_cpu_timed(int64_t calls, void *const *functions,
                                    const int32_t *arities, const int32_t *arguments,
                                    void *const *values, int64_t *times) {
    return run_sequence(calls, functions, arities, arguments, values, times,
                        CLOCK_THREAD_CPUTIME_ID);
}
"""


RUNTIME_SOURCE = (RUNTIME_SOURCE + _sequence_source(SEQUENCE_MAX_ARGS)).replace(
    "HETEROCC_DEFAULT_SPIN_US", str(DEFAULT_SPIN_US)).replace(
    "HETEROCC_SEQUENCE_MAX_ARGS", str(SEQUENCE_MAX_ARGS))

#: symbols generated code may call besides libm and libc.
PARALLEL_FOR = "heterocc_parallel_for"
#: the runtime's entries that run a sequence of kernels, and one timing each kernel on
#: CLOCK_MONOTONIC (see ``_sequence_source``)
RUN_SEQUENCE = "heterocc_run_sequence"
RUN_SEQUENCE_TIMED = "heterocc_run_sequence_timed"
#: the entry timing each kernel of a sequence on the calling thread's CPU clock
RUN_SEQUENCE_CPU_TIMED = "heterocc_run_sequence_cpu_timed"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    path = Path(base) / "heterocc"
    try:
        path.mkdir(parents=True, exist_ok=True)
        return path
    except OSError:
        path = Path(tempfile.gettempdir()) / f"heterocc-{os.getuid()}"
        path.mkdir(parents=True, exist_ok=True)
        return path


def compiler() -> str:
    """The C compiler used to build the runtime and link libraries (``CC`` or ``cc``)."""
    return os.environ.get("CC", "cc")


def run_compiler(args: list[str], what: str, command: list[str] | None = None) -> None:
    """Run the C compiler (``command``, default :func:`compiler`), turning a failure
    into a CompileError with its output."""
    command = command or [compiler()]
    try:
        result = subprocess.run([*command, *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise CompileError(f"{what}: C compiler {command[0]!r} not found; install one or set "
                           "CC") from None
    if result.returncode != 0:
        raise CompileError(f"{what} failed ({command[0]} exit {result.returncode}):\n"
                           f"{result.stderr.strip()}")


def write_runtime_source(folder: Path) -> Path:
    """The runtime's C source written into ``folder`` (for linking into a library)."""
    path = folder / "heterocc_runtime.c"
    path.write_text(RUNTIME_SOURCE)
    return path


@functools.cache
def runtime_library() -> Path:
    """Path of the compiled runtime shared library (built on first use, then cached)."""
    digest = hashlib.sha256(RUNTIME_SOURCE.encode()).hexdigest()[:16]
    target = _cache_dir() / f"heterocc_runtime_{digest}.so"
    if not target.exists():
        with tempfile.TemporaryDirectory() as tmp:
            source = write_runtime_source(Path(tmp))
            partial = Path(tmp) / target.name
            run_compiler(["-O2", "-shared", "-fPIC", "-pthread", "-o", str(partial), str(source)],
                         "building the heterocc runtime")
            # Atomic publish: concurrent processes may build it at the same time.
            staged = target.with_suffix(f".{os.getpid()}.tmp")
            staged.write_bytes(partial.read_bytes())
            os.replace(staged, target)
    return target


@functools.cache
def load_runtime() -> ctypes.CDLL:
    """The runtime loaded into this process, its symbols visible to JIT-compiled code."""
    path = str(runtime_library())
    library = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    llvm.load_library_permanently(path)
    return library


def num_threads() -> int:
    """Threads the runtime runs parallel loops on."""
    return int(load_runtime().heterocc_num_threads())


@functools.cache
def _evict() -> Callable[[int | None, int], int]:
    """The runtime's ``heterocc_evict``, its argument types declared once."""
    evict = load_runtime().heterocc_evict
    evict.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    evict.restype = ctypes.c_int
    return evict


def evicts_here() -> bool:
    """Whether :func:`evict_from_caches` evicts anything on this CPU (asked of an empty
    range, which touches no memory)."""
    return bool(_evict()(None, 0))


def evict_from_caches(arrays) -> bool:
    """Evict the memory of each of ``arrays`` (NumPy arrays) from every level of every
    core's caches; False where this CPU has no instruction for it (nothing evicted)."""
    evict = _evict()
    return all([bool(evict(array.ctypes.data, array.nbytes)) for array in arrays])


def pool_counters() -> tuple[int, int]:
    """``(loops, spread)``: the parallel loops this process's pool has run so far, and
    those in which a worker ran iterations on another CPU than the calling thread's.
    The others ran at one thread's speed (no worker was awake in time, or the scheduler
    had put it on the caller's core)."""
    counts = (ctypes.c_int64 * 2)()
    load_runtime().heterocc_pool_counters(counts)
    return int(counts[0]), int(counts[1])
