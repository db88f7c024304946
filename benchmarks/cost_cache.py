"""What storing an estimate costs as the cost cache grows: ``CostCache.put`` appends one
journal line, against the peer of rewriting the whole JSON object for every entry (what
it did before the journal, and what a naive cache does).

Run (seconds):
    python benchmarks/cost_cache.py [--sizes 500 5000 20000] [--puts 200]
Printed per cache size: milliseconds per put, journal and rewrite, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from machine import describe

from heterocc.sdk import CostCache

#: an entry the size of the CPU's estimates (seconds, threads, kernels, how)
ENTRY = {"seconds": 1.234e-4, "threads": 2, "kernels": ["conv2d_nchwc_relu_0", "add_1"],
         "how": "measured: fastest of 5 rounds"}


def _seeded(directory: Path, size: int) -> None:
    entries = {f"llvm-host/{i:020x}": ENTRY for i in range(size)}
    (directory / "costs.json").write_text(json.dumps(entries, sort_keys=True))


def journal_seconds(size: int, puts: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        _seeded(Path(directory), size)
        cache = CostCache(directory)
        start = time.perf_counter()
        for i in range(puts):
            cache.put("llvm-host", f"new{i}", ENTRY)
        return (time.perf_counter() - start) / puts


def rewrite_seconds(size: int, puts: int) -> float:
    """The peer: read, merge and rewrite the object for every entry."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "costs.json"
        _seeded(Path(directory), size)
        start = time.perf_counter()
        for i in range(puts):
            entries = json.loads(path.read_text())
            entries[f"llvm-host/new{i}"] = ENTRY
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(entries, sort_keys=True))
            tmp.replace(path)
        return (time.perf_counter() - start) / puts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 5000, 20000])
    parser.add_argument("--puts", type=int, default=200)
    args = parser.parse_args()
    print(describe())
    print(f"{'entries':>8} {'journal ms/put':>15} {'rewrite ms/put':>15} {'rewrite/journal':>16}")
    for size in args.sizes:
        journal, rewrite = journal_seconds(size, args.puts), rewrite_seconds(size, args.puts)
        print(f"{size:8d} {journal * 1e3:15.3f} {rewrite * 1e3:15.3f} {rewrite / journal:15.1f}x")


if __name__ == "__main__":
    main()
