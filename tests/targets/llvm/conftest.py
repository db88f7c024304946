"""Fixtures of the llvm target's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def llvm_jobs(monkeypatch):
    """``use(jobs)``: :func:`build_later` compiles with a fresh pool of ``jobs`` (its
    threads and worker processes ended after the test)."""
    from heterocc.targets.llvm import module as llvm_module

    pools = []

    def use(jobs: int):
        monkeypatch.setenv(llvm_module.JOBS_VARIABLE, str(jobs))
        llvm_module._llvm_pool.cache_clear()
        pools.append(llvm_module._llvm_pool())
        return pools[-1]

    yield use
    for pool in pools:
        pool.shutdown()
    llvm_module._llvm_pool.cache_clear()
