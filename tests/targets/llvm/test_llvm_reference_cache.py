"""The reference kernel's code kept on disk (``reference_kernel.ReferenceCodeCache``): a
second process loads it instead of building it, and only an entry this cache wrote
for the key asked for is ever loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from heterocc.targets.llvm import reference_kernel as rk
from heterocc.targets.llvm.cpu import host_cpu, runs_on_host

KEY = "reference1/llvm -mcpu=test/rules=hand/c4s2/0123"


def _entry(cache: rk.ReferenceCodeCache):
    cache.store(KEY, {"note": "x"}, {"code": np.arange(64, dtype=np.uint8),
                                     "constant0": np.ones((2, 3), np.int32)})
    return cache.entry_path(KEY)


def test_an_entry_round_trips(tmp_path):
    cache = rk.ReferenceCodeCache(tmp_path)
    path = _entry(cache)
    record, arrays = cache.load(KEY)
    assert record == {"note": "x", "key": KEY}
    assert arrays["code"].tobytes() == bytes(range(64))
    assert arrays["constant0"].dtype == np.int32 and arrays["constant0"].sum() == 6
    # readable by its owner only, like the key that authenticates it
    for made in (path, tmp_path / rk.ReferenceCodeCache.KEY_FILE):
        assert os.stat(made).st_mode & 0o077 == 0
    assert cache.load(KEY + "other") is None  # nothing stored for another key


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "empty", "other key's mac",
                                    "stale key", "group-writable", "a link"])
def test_an_entry_this_cache_did_not_write_as_is_not_loaded(tmp_path, damage):
    """A damaged, forged, stale or unsafe entry is refused, not parsed; storing again
    (what a rebuild does) makes it loadable again."""
    cache = rk.ReferenceCodeCache(tmp_path)
    path = _entry(cache)
    data = path.read_bytes()
    if damage == "flipped byte":
        path.write_bytes(data[:-10] + bytes([data[-10] ^ 1]) + data[-9:])
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "other key's mac":  # an entry made with another cache's secret
        forger = rk.ReferenceCodeCache(tmp_path / "elsewhere")
        path.write_bytes(_entry(forger).read_bytes())
    elif damage == "stale key":  # a valid entry of another key put in this one's place
        cache.store(KEY + "/older", {"note": "old"}, {"code": np.zeros(4, np.uint8)})
        os.replace(cache.entry_path(KEY + "/older"), path)
    elif damage == "group-writable":
        os.chmod(path, 0o664)
    elif damage == "a link":
        target = tmp_path / "real.bin"
        os.replace(path, target)
        os.symlink(target, path)
    assert cache.load(KEY) is None
    if damage == "a link":
        path.unlink()
    _entry(cache)
    assert cache.load(KEY)[0]["note"] == "x"


def test_a_key_file_others_may_write_disables_the_cache(tmp_path):
    cache = rk.ReferenceCodeCache(tmp_path)
    _entry(cache)
    os.chmod(tmp_path / rk.ReferenceCodeCache.KEY_FILE, 0o666)
    assert cache.load(KEY) is None
    cache.store(KEY, {"note": "y"}, {"code": np.zeros(4, np.uint8)})  # not written either
    os.chmod(tmp_path / rk.ReferenceCodeCache.KEY_FILE, 0o600)
    assert cache.load(KEY)[0]["note"] == "x"


def test_the_key_names_cpu_rules_and_sources():
    class Target:
        tuning_key = "llvm -mcpu=znver4"
        rules = "none"

    key = rk.reference_key(Target())
    assert key.startswith("reference1/llvm -mcpu=znver4/rules=none/")
    assert key.endswith(rk.source_digest()) and len(rk.source_digest()) == 64


CHILD = r"""
import json, sys
import numpy as np
from heterocc.targets.llvm.target import LLVMTarget
from heterocc.targets.llvm import cost
from heterocc.targets.llvm.reference_kernel import reference_kernel
target = LLVMTarget()
kernel = reference_kernel(target, sys.argv[1])
calls = cost._reference_calls(target)
run, args = calls[cost.REFERENCE]
out = run(args)[0]
print(json.dumps({"loaded": kernel.loaded, "same": run is kernel,
                  "threads": cost.kernel_threads(run), "sum": int(np.abs(out.astype(int)).sum()),
                  "shape": list(out.shape)}))
"""


def _child(directory) -> dict:
    env = dict(os.environ, HETEROCC_CACHE_DIR=str(directory))
    out = subprocess.run([sys.executable, "-c", CHILD, str(directory)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.skipif(not runs_on_host(host_cpu()), reason="needs code that runs here")
def test_a_second_process_loads_the_code_and_a_damaged_entry_is_rebuilt(tmp_path):
    """The first process builds the reference and keeps its code; the second loads it
    (the same results); after the entry is damaged, a process builds it again rather
    than loading it, and the one after loads the new entry."""
    first = _child(tmp_path)
    assert not first["loaded"] and first["same"] and first["threads"] >= 1
    assert first["shape"] == [1, rk.REFERENCE_CHANNELS, rk.REFERENCE_SIZE, rk.REFERENCE_SIZE]
    second = _child(tmp_path)
    assert second["loaded"] and second == {**first, "loaded": True}
    (entry,) = tmp_path.glob("reference-*.bin")
    data = bytearray(entry.read_bytes())
    data[len(data) // 3] ^= 0xFF  # in the machine code or the weights
    entry.write_bytes(bytes(data))
    third = _child(tmp_path)
    assert not third["loaded"] and third == {**first, "loaded": False}
    assert _child(tmp_path)["loaded"]


@pytest.mark.skipif(not runs_on_host(host_cpu()), reason="needs code that runs here")
def test_threads_timing_the_shared_reference_write_their_own_outputs(tmp_path, monkeypatch):
    """The reference kernel is one per process; each thread calling it gets outputs of
    its own, equal to those of another thread for the same arguments."""
    import threading

    from heterocc.targets.llvm.target import LLVMTarget

    monkeypatch.setenv("HETEROCC_CACHE_DIR", str(tmp_path))
    kernel = rk.reference_kernel(LLVMTarget(), str(tmp_path))
    here = kernel(kernel.arguments)
    there: list = []
    thread = threading.Thread(target=lambda: there.append(kernel(kernel.arguments)))
    thread.start()
    thread.join()
    (theirs,) = there
    assert all(a is not b for a, b in zip(here, theirs))
    for a, b in zip(here, theirs):
        np.testing.assert_array_equal(a, b)
    assert kernel(kernel.arguments)[0] is here[0]  # a thread keeps its arrays
