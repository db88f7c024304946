"""LLVM's backlog compiled on worker processes: the same object code as in this
process, errors that name the module and what to do, one job where one core is all
there is, and this process's LLVM where a worker cannot start."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from heterocc import te
from heterocc.errors import CompileError
from heterocc.targets.llvm import module as llvm_module

RNG = np.random.default_rng(11)


def _lowered(name="f", n=64):
    A = te.placeholder((n,), "float32", "A")
    B = te.compute((n,), lambda i: te.exp(A[i]) * 2.0 + A[i], name="B")
    s = te.create_schedule(B)
    _, inner = s[B].split(s[B].op.axis[0], factor=16)
    s[B].vectorize(inner)
    return te.lower(s, [A, B], name=name)


def _generated(name="f"):
    module = llvm_module.LLVMModule.__new__(llvm_module.LLVMModule)
    module._generate([_lowered(name)], name, None)
    return module


def _check(module, name="f"):
    a = RNG.standard_normal(64).astype(np.float32)
    out = np.zeros(64, np.float32)
    module[name](a, out)
    np.testing.assert_allclose(out, np.exp(a) * 2 + a, rtol=1e-5)
    return a, out


@pytest.fixture
def worker():
    process = llvm_module._Worker()
    yield process
    process.close()


def test_a_worker_makes_the_object_code_this_process_makes(worker):
    state = llvm_module.host()
    generated = _generated()
    code, seconds = worker.compile(state.worker_header, generated.unoptimized_ir, "f")
    here = state.jit_machine.emit_object(
        llvm_module._optimized_module(generated.unoptimized_ir, state.jit_machine))
    assert code == here and seconds > 0


def test_a_module_compiled_by_a_worker_runs_and_computes_what_one_compiled_here_does(worker):
    remote, local = _generated(), _generated()
    remote._compile(worker)
    local._compile()
    a, out = _check(remote)
    again = np.zeros_like(out)
    local["f"](a, again)
    assert out.tobytes() == again.tobytes()
    # optimized again here on demand (deterministic); the symbols differ by module number
    assert remote.ir.replace(*remote._symbols, *local._symbols) == local.ir
    assert remote.llvm_cpu_seconds > 0


def test_a_worker_reports_ir_that_does_not_verify_as_this_process_would(worker):
    state = llvm_module.host()
    broken = "define void @f(ptr %p) {\nentry:\n  %x = add i32 %y, 1\n  %y = add i32 %x, 1\n" \
             "  ret void\n}\n"
    with pytest.raises(CompileError, match="does not verify"):
        worker.compile(state.worker_header, broken, "f")
    with pytest.raises(CompileError, match="LLVM failed in its worker process.*parsing"):
        worker.compile(state.worker_header, "define nonsense", "g")
    worker.compile(state.worker_header, _generated().unoptimized_ir, "f")  # still serving


def test_a_dead_worker_is_an_error_naming_the_module_its_status_and_the_way_out(worker):
    worker._process.kill()
    worker._process.wait()
    with pytest.raises(CompileError, match=r"module 'fused_1'.*exited with status -9.*"
                                           r"HETEROCC_LLVM_JOBS=1"):
        worker.compile(llvm_module.host().worker_header, _generated().unoptimized_ir,
                       "fused_1")


def test_jobs_one_per_core_at_most_four_or_as_the_environment_says(monkeypatch):
    monkeypatch.delenv(llvm_module.JOBS_VARIABLE, raising=False)
    monkeypatch.setattr(llvm_module.os, "sched_getaffinity", lambda pid: {0})
    assert llvm_module.llvm_jobs() == 1  # one core: LLVM stays in this process
    monkeypatch.setattr(llvm_module.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert llvm_module.llvm_jobs() == 4
    monkeypatch.setenv(llvm_module.JOBS_VARIABLE, "3")
    assert llvm_module.llvm_jobs() == 3
    for bad in ("0", "two"):
        monkeypatch.setenv(llvm_module.JOBS_VARIABLE, bad)
        with pytest.raises(CompileError, match="HETEROCC_LLVM_JOBS.*1 or more"):
            llvm_module.llvm_jobs()


def _on_both_threads(pool):
    """What ``pool._worker()`` gives on each of its two threads (both kept busy at once)."""
    barrier = threading.Barrier(2)

    def claim():
        barrier.wait(timeout=30)
        return pool._worker()

    futures = [pool.executor.submit(claim) for _ in range(2)]
    return [f.result() for f in futures]


def _build_several(count):
    """``count`` modules submitted at once (a backlog), each checked."""
    builds = [llvm_module.build_later(_lowered(f"f{k}"), name=f"m{k}") for k in range(count)]
    for k, wait in enumerate(builds):
        _check(wait(), f"f{k}")


def test_with_several_jobs_each_thread_compiles_through_its_own_worker(llvm_jobs):
    pool = llvm_jobs(2)
    workers = _on_both_threads(pool)
    assert all(w is not None for w in workers) and workers[0] is not workers[1]
    _build_several(6)


def test_build_later_with_one_job_never_starts_a_worker(llvm_jobs, monkeypatch):
    def refuse():
        raise AssertionError("a worker process was started")

    monkeypatch.setattr(llvm_module, "_Worker", refuse)
    llvm_jobs(1)
    _build_several(4)


def test_a_thread_whose_worker_cannot_start_compiles_here(llvm_jobs, monkeypatch):
    def cannot():
        raise OSError("no such interpreter")

    monkeypatch.setattr(llvm_module, "_Worker", cannot)
    pool = llvm_jobs(2)
    assert _on_both_threads(pool) == [None, None]
    module = _generated()
    pool.compile(module)  # this thread's slot: a worker, which cannot start
    _check(module)


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] not in "ZX"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel whether the id is taken
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def test_a_worker_whose_compiling_process_dies_exits_while_its_input_stays_open():
    # The compiling process starts a worker, hands the worker's input to a second
    # process that keeps it open (as a worker deep in LLVM never reads it), and is
    # killed, as a tuning candidate's measuring process is at its time-out.
    script = (
        "import subprocess, sys, time\n"
        "from heterocc.targets.llvm import module\n"
        "worker = module._Worker()._process\n"
        "holder = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
        " pass_fds=(worker.stdin.fileno(),))\n"
        "print(worker.pid, holder.pid, flush=True)\n"
        "time.sleep(120)\n")
    compiling = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                 text=True)
    worker, holder = map(int, compiling.stdout.readline().split())
    try:
        assert _running(worker)
        compiling.kill()
        compiling.wait()
        deadline = time.monotonic() + 20
        while _running(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(worker), "the orphaned worker kept running"
        assert _running(holder)  # its input is still open: the worker did not see it close
    finally:
        for pid in (worker, holder):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
