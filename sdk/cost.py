"""The SDK's cost interface: how long a function takes on a target.

Placement by cost (``heterocc.compile(..., placement="cost")``, ``heterocc partition
--placement cost``) asks every target how long each candidate function would take on
it. A target answers through one optional hook, :class:`CostTarget`::

    def estimate(self, function: Node) -> CostEstimate | None

returning the compute time and the time its host link spends moving the function's
tensors (None: it cannot tell for this function, which then stays where the patterns
put it). An accelerator derives it from its cycle model at a declared clock
(:func:`accelerator_estimate`) and a :class:`HostLink`; a CPU from measurement.

A second optional hook, ``lower_bound(function) -> (seconds, how) | None``, bounds a
call's time without compiling anything: the placement skips a target's ``estimate``
where the other device's estimate already beats that bound.

A third, ``estimate_within(graph, parts)``, tells a target, before it is asked, the
whole graph the functions were outlined from (``parts``: each function node and the
nodes of ``graph`` it holds): a target whose build fuses across the functions'
boundaries (the CPU) estimates each as a share of the kernels its build will compile,
and compiles those kernels once for both. With it, a fourth, ``estimate_placed(graph,
kept, offloaded) -> {function: CostEstimate}``, asked once the placement has decided
(``kept``: the functions it keeps on the target, each with its nodes of ``graph``;
``offloaded``: the ``(nodes, target)`` groups that leave it), gives those functions'
estimates as the target's build fuses the graph then and as its kernels run then (the
CPU's one after another without the offloaded layers between them); a function left
out keeps its estimate.

Estimates that take time to make (a kernel compiled and timed) are kept on disk by
:class:`CostCache`, keyed by the target's own key and :func:`workload_key` (the
function's structure: ops, attributes, types; not the contents of its weights, which
do not change its time), so a second compile of a model measures nothing again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from heterocc.errors import TargetError
from heterocc.ir.graph import Node

from .protocols import Target
from .te_target import structure_key

#: where :class:`CostCache` keeps its file unless ``HETEROCC_CACHE_DIR`` says otherwise
DEFAULT_CACHE_DIR = "~/.cache/heterocc"


@dataclass(frozen=True)
class HostLink:
    """The connection between host memory and a device: ``gbps`` gigabytes per second,
    and ``latency_us`` microseconds per transfer (one buffer copied in or out)."""

    gbps: float = 1.0
    latency_us: float = 2.0

    def __post_init__(self):
        if not self.gbps > 0 or self.latency_us < 0:
            raise TargetError(f"host link of {self.gbps} GB/s and {self.latency_us} us: the "
                              "bandwidth must be positive and the latency not negative")

    def seconds(self, nbytes: int, transfers: int = 1) -> float:
        """Time to move ``nbytes`` in ``transfers`` separate copies."""
        return transfers * self.latency_us * 1e-6 + nbytes / (self.gbps * 1e9)


@dataclass(frozen=True)
class Port:
    """One tensor a device's call copies over the host link: ``link_s`` and ``host_s``
    the call spends on it (the copy, and the host's work laying it out), and ``key``, the form the
    device holds it in (None: it can only come from, or go to, the host). Where a
    producer's output and its consumer's input have equal keys and both run on one
    device, the device hands the tensor over in its own memory and neither side
    spends its port's seconds (placement by cost counts that: see
    ``docs/add-a-target.md``)."""

    key: str | None
    #: the copy's time over the link, and the host's work on the tensor
    link_s: float
    host_s: float = 0.0

    @property
    def seconds(self) -> float:
        """What the call spends on the tensor: its copy and the host's work."""
        return self.link_s + self.host_s


@dataclass
class CostEstimate:
    """How long one call of a function takes on a target: ``compute_s`` on the device,
    ``transfer_s`` moving its tensors over the host link (zero on the host itself),
    ``host_s`` the host CPU's own work on a device's call (laying its operands out in
    the device's layout and back, e.g. an accelerator's im2col: zero on the host
    itself, whose kernels take their operands as they are); ``source`` says where the
    figure came from ("cycle model at 100 MHz", "measured", "cache") and ``detail``
    anything worth reporting (cycles, bytes, samples)."""

    compute_s: float
    transfer_s: float = 0.0
    source: str = ""
    detail: dict = field(default_factory=dict)
    host_s: float = 0.0
    #: a device's estimate only: what the call spends on each input (in the function's
    #: input order) and on its output, and in what form the device holds them
    #: (:class:`Port`); empty where the device cannot keep a tensor between calls
    inputs: tuple[Port, ...] = ()
    output: Port | None = None

    @property
    def total_s(self) -> float:
        """Compute, transfer and the host's part together: what placing the function
        there costs one input end to end."""
        return self.compute_s + self.transfer_s + self.host_s

    def to_json(self) -> dict:
        """Milliseconds, rounded to the microsecond, with the source and detail."""
        return {"total_ms": round(self.total_s * 1e3, 4),
                "compute_ms": round(self.compute_s * 1e3, 4),
                "transfer_ms": round(self.transfer_s * 1e3, 4),
                "host_ms": round(self.host_s * 1e3, 4),
                "source": self.source, **self.detail}


@runtime_checkable
class CostTarget(Target, Protocol):
    """A target that can say how long a function takes on it (placement by cost)."""

    def estimate(self, function: Node) -> CostEstimate | None:
        """The time of one call of ``function`` (a composite or a single-op function
        node) on this target, or None when it cannot tell."""
        ...


def can_estimate(target: object) -> bool:
    """Whether ``target`` has the :class:`CostTarget` hook."""
    return callable(getattr(target, "estimate", None))


def accelerator_estimate(cycles: int, clock_mhz: float, link: HostLink, bytes_moved: int,
                         transfers: int, source: str = "", host_s: float = 0.0
                         ) -> CostEstimate:
    """An accelerator's estimate: ``cycles`` of its clock, plus ``bytes_moved`` over
    ``link`` in ``transfers`` copies, plus ``host_s`` of the host's own work per call
    (:attr:`CostEstimate.host_s`)."""
    if not clock_mhz > 0:
        raise TargetError(f"clock of {clock_mhz} MHz: give a positive clock_mhz")
    return CostEstimate(cycles / (clock_mhz * 1e6), link.seconds(bytes_moved, transfers),
                        source or f"cycle model at {clock_mhz:g} MHz",
                        {"cycles": int(cycles), "bytes": int(bytes_moved)}, host_s)


def random_arguments(values, seed: int = 0) -> list[np.ndarray]:
    """Inputs of the values' types: integers over their dtype's range (int8 over all
    256 values), floats standard normal."""
    rng = np.random.default_rng(seed)
    args = []
    for value in values:
        dtype = np.dtype(value.type.dtype)
        shape = value.type.shape
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            args.append(rng.integers(max(info.min, -128), min(info.max, 127) + 1, shape,
                                     dtype=dtype))
        elif dtype.kind == "b":
            args.append(rng.integers(0, 2, shape).astype(bool))
        else:
            args.append(rng.standard_normal(shape).astype(dtype))
    return args


def workload_key(function: Node) -> str:
    """A short stable key of what a function's time depends on: its body's structure
    (``structure_key``: ops, attributes, types, dataflow), not its weights' contents.
    Remembered for the last functions asked (each target asks for every candidate)."""
    known = _KEYS.get(id(function))
    if known is not None and known[0] is function:
        return known[1]
    key = hashlib.sha1(repr(structure_key(function.body)).encode()).hexdigest()[:20]
    if len(_KEYS) >= 512:  # a model's candidates; the functions are held until cleared
        _KEYS.clear()
    _KEYS[id(function)] = (function, key)
    return key


#: workload keys by id of the function node (kept with it, so an id is not reused)
_KEYS: dict[int, tuple[Node, str]] = {}


#: a journal longer than this (and than the object it follows) is merged into the object
JOURNAL_COMPACT_BYTES = 64 * 1024


class CostCache:
    """Estimates kept on disk, in ``directory`` (default ``$HETEROCC_CACHE_DIR`` or
    ``~/.cache/heterocc``), by ``target_key/workload``.

    Two files: ``costs.json``, a JSON object of entries, and ``costs.jsonl``, a journal of
    the entries stored since, one JSON line each, read after the object (a later line
    wins). Storing an entry appends one line, so its cost does not grow with everything
    the cache ever measured (rewriting the object for every entry did: quadratic over a
    cold compile once the cache is large). The journal is merged into the object once it
    outgrows both :data:`JOURNAL_COMPACT_BYTES` and the object, so rewrites cost a
    constant factor of the appends. Several processes share the files under a lock
    (``costs.lock``); a damaged object or line, or a cache that cannot be written, costs a
    measurement next time, never an error."""

    _lock = threading.Lock()

    def __init__(self, directory: str | os.PathLike | None = None,
                 filename: str = "costs.json"):
        root = directory or os.environ.get("HETEROCC_CACHE_DIR") or DEFAULT_CACHE_DIR
        self.path = Path(root).expanduser() / filename
        self.journal = self.path.with_suffix(".jsonl")
        self.lock = self.path.with_suffix(".lock")
        self._entries: dict[str, dict] | None = None

    def _load(self) -> dict[str, dict]:
        if self._entries is None:
            try:
                with _file_lock(self.lock, fcntl.LOCK_SH):
                    self._entries = self._read()
            except OSError:
                self._entries = self._read()  # a read-only cache directory: no lock file
        return self._entries

    def _read(self) -> dict[str, dict]:
        entries = _read_object(self.path)
        entries.update(_read_journal(self.journal))
        return entries

    def get(self, target_key: str, workload: str) -> dict | None:
        """The entry stored for ``workload`` on ``target_key``, or None."""
        return self._load().get(f"{target_key}/{workload}")

    def put(self, target_key: str, workload: str, entry: dict) -> None:
        """Store ``entry`` (JSON-serializable): one line appended to the journal under the
        lock (other caches and processes write the same files), the journal merged into
        the object when it has grown large."""
        key = f"{target_key}/{workload}"
        line = json.dumps({"key": key, "entry": entry}, sort_keys=True) + "\n"
        with self._lock:
            self._load()[key] = entry
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with _file_lock(self.lock, fcntl.LOCK_EX):
                    with open(self.journal, "ab+") as journal:
                        if journal.seek(0, os.SEEK_END) and _last_byte(journal) != b"\n":
                            line = "\n" + line  # after a line cut short, on a line of its own
                        journal.write(line.encode())
                        journal_bytes = journal.tell()
                    if journal_bytes > max(JOURNAL_COMPACT_BYTES, _size(self.path)):
                        self._compact()
            except OSError:
                pass

    def _compact(self) -> None:
        """Merge the journal into the object (under the exclusive lock): the object is
        replaced whole before the journal is emptied, so a crash between the two leaves
        lines that repeat what the object holds, never a lost entry."""
        entries = self._read()
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries, sort_keys=True))
        os.replace(tmp, self.path)
        with open(self.journal, "w"):
            pass


@contextlib.contextmanager
def _file_lock(path: Path, operation: int):
    with open(path, "a") as lock:
        fcntl.flock(lock, operation)
        yield


def _last_byte(file) -> bytes:
    file.seek(-1, os.SEEK_END)
    return file.read(1)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_object(path: Path) -> dict[str, dict]:
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # no cache yet, or a damaged one: measure again
    return entries if isinstance(entries, dict) else {}


def _read_journal(path: Path) -> dict[str, dict]:
    """The journal's entries in order; a line that does not parse (cut short by a killed
    process, or edited) is skipped."""
    entries: dict[str, dict] = {}
    try:
        text = path.read_text()
    except (OSError, ValueError):
        return entries
    for line in text.splitlines():
        try:
            record = json.loads(line)
            entries[str(record["key"])] = record["entry"]
        except (ValueError, KeyError, TypeError):
            continue
    return entries
