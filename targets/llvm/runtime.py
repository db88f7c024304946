"""The C runtime that generated code calls: a persistent pthread pool running the
iterations of parallel loops across cores.

Generated code calls ``heterocc_parallel_for(task, closure, n)``; the pool splits
``[0, n)`` into contiguous chunks (a few per thread) that the threads, the caller
included, take in turn from a shared counter and run as ``task(begin, end, closure)``:
a thread slowed down by another process simply takes fewer chunks. Nested or concurrent
parallel regions run serially in the calling thread, so the pool never deadlocks. The
pool is rebuilt after fork(). The thread count is ``HETEROCC_NUM_THREADS`` or the CPUs
this process may run on.

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
from pathlib import Path

import llvmlite.binding as llvm

from ...errors import CompileError

RUNTIME_SOURCE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

typedef void (*heterocc_task)(int64_t begin, int64_t end, void *closure);

static pthread_mutex_t region_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_ready = PTHREAD_COND_INITIALIZER;
static pthread_cond_t work_done = PTHREAD_COND_INITIALIZER;
static int pool_threads = 0;
static int fork_handler_installed = 0;
static uint64_t generation = 0;
static uint64_t pool_start_generation = 0;
static int pending = 0;
static heterocc_task job_task;
static void *job_closure;
static int64_t job_n;
static int job_chunks;
static int next_chunk;
static __thread int inside_region = 0;

/* Chunks per thread: enough to even out threads slowed by other processes, few
   enough to keep each chunk's data contiguous. */
#define CHUNKS_PER_THREAD 4

static void run_chunks(void) {
    for (;;) {
        int chunk = __atomic_fetch_add(&next_chunk, 1, __ATOMIC_RELAXED);
        if (chunk >= job_chunks) return;
        int64_t begin = job_n * chunk / job_chunks;
        int64_t end = job_n * (chunk + 1) / job_chunks;
        if (begin < end) job_task(begin, end, job_closure);
    }
}

static void *worker_main(void *arg) {
    (void)arg;
    uint64_t seen = pool_start_generation;
    inside_region = 1;
    pthread_mutex_lock(&state_lock);
    for (;;) {
        while (generation == seen) pthread_cond_wait(&work_ready, &state_lock);
        seen = generation;
        pthread_mutex_unlock(&state_lock);
        run_chunks();
        pthread_mutex_lock(&state_lock);
        if (--pending == 0) pthread_cond_signal(&work_done);
    }
    return NULL;
}

static int wanted_threads(void) {
    const char *env = getenv("HETEROCC_NUM_THREADS");
    if (env && atoi(env) > 0) return atoi(env);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* A forked child has none of the workers; it starts a fresh pool on first use. */
static void reset_after_fork(void) {
    pthread_mutex_init(&region_lock, NULL);
    pthread_mutex_init(&state_lock, NULL);
    pthread_cond_init(&work_ready, NULL);
    pthread_cond_init(&work_done, NULL);
    pool_threads = 0;
    pending = 0;
    inside_region = 0;
}

static void start_pool(void) {
    if (!fork_handler_installed) {
        pthread_atfork(NULL, NULL, reset_after_fork);
        fork_handler_installed = 1;
    }
    int wanted = wanted_threads();
    pool_start_generation = generation;
    int started = 1;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 16u << 20);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (int t = 1; t < wanted; ++t) {
        pthread_t thread;
        if (pthread_create(&thread, &attr, worker_main, NULL) != 0) break;
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
    pthread_mutex_lock(&state_lock);
    job_task = task;
    job_closure = closure;
    job_n = n;
    int64_t chunks = (int64_t)pool_threads * CHUNKS_PER_THREAD;
    job_chunks = (int)(n < chunks ? n : chunks);
    next_chunk = 0;
    pending = pool_threads - 1;
    ++generation;
    pthread_cond_broadcast(&work_ready);
    pthread_mutex_unlock(&state_lock);
    inside_region = 1;
    run_chunks();
    inside_region = 0;
    pthread_mutex_lock(&state_lock);
    while (pending > 0) pthread_cond_wait(&work_done, &state_lock);
    pthread_mutex_unlock(&state_lock);
    pthread_mutex_unlock(&region_lock);
    return 0;
}
"""

#: symbols generated code may call besides libm and libc.
PARALLEL_FOR = "heterocc_parallel_for"


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
