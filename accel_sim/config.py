"""The accelerator's hardware configuration: the one spec everything derives from.

The ISA's field widths, the simulator's buffers, the compiler's tiling and the
RTL parameters all come from a :class:`HardwareConfig`. Its :attr:`name` pins
every parameter that the encoding or the functional behaviour depends on, so an
artifact or a bitstream built for one config is never run on another.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import AcceleratorError

#: element widths (bits) the data paths support, with the NumPy type of each.
_DTYPES = {8: np.dtype(np.int8), 16: np.dtype(np.int16), 32: np.dtype(np.int32)}

#: micro-ops are one 32-bit word each.
UOP_BYTES = 4

#: the width of every instruction word.
INSTRUCTION_BITS = 128

#: log2 of the largest on-chip buffer a config may have (16 MiB)
MAX_LOG_BUFFER_BYTES = 24

#: the config keys that bound one stream's work (instructions, DMA tiles, loop iterations).
WORK_BUDGET_KEYS = ("max_stream_instructions", "max_stream_tiles", "max_stream_iterations")


@dataclass(frozen=True)
class HardwareConfig:
    """Shape, data types, buffer sizes and timing of one accelerator instance.

    The GEMM core multiplies a ``batch x block_in`` input tile by the transpose
    of a ``block_out x block_in`` weight tile into a ``batch x block_out``
    accumulator tile each cycle. Buffer sizes are powers of two given as log2
    of their size in bytes. Timing parameters feed only the timing model and are
    therefore not part of :attr:`name`; nor are the work budget's
    (``max_stream_*``: how many instructions, DMA tiles and GEMM/ALU iterations one
    stream may ask for before the checker, the timing model and the simulator refuse
    it).
    """

    log_batch: int = 0
    log_block_in: int = 4
    log_block_out: int = 4
    inp_bits: int = 8
    wgt_bits: int = 8
    acc_bits: int = 32
    out_bits: int = 8
    log_uop_buffer_bytes: int = 15
    log_inp_buffer_bytes: int = 15
    log_wgt_buffer_bytes: int = 18
    log_acc_buffer_bytes: int = 17
    bus_width_bits: int = 64
    token_queue_depth: int = 64
    # timing model (cycles)
    instruction_overhead_cycles: int = 4
    dram_latency_cycles: int = 64
    dram_bytes_per_cycle: int = 8
    gemm_cycles_per_iteration: int = 1
    alu_cycles_per_iteration: int = 1
    # the clock and the host link, for time estimates (placement by cost)
    clock_mhz: int = 100
    link_mbytes_per_s: int = 1000
    link_latency_ns: int = 2000
    # the work one stream may ask for (docs/isa.md section 6, rule 9): like the timing
    # parameters, host policy rather than hardware, so not part of the name
    max_stream_instructions: int = 1 << 20
    max_stream_tiles: int = 1 << 24
    max_stream_iterations: int = 1 << 24

    def __post_init__(self) -> None:
        _validate(self)

    # --- shapes -----------------------------------------------------------------
    @property
    def batch(self) -> int:
        """Rows of an input and of an accumulator tile."""
        return 1 << self.log_batch

    @property
    def block_in(self) -> int:
        """Reduction length of one GEMM-core step (columns of input and weight tiles)."""
        return 1 << self.log_block_in

    @property
    def block_out(self) -> int:
        """Output channels of one GEMM-core step (rows of a weight tile)."""
        return 1 << self.log_block_out

    @property
    def macs_per_iteration(self) -> int:
        """Multiply-accumulates the GEMM core performs per micro-op iteration."""
        return self.batch * self.block_in * self.block_out

    # --- data types -------------------------------------------------------------
    @property
    def inp_dtype(self) -> np.dtype:
        """NumPy type of input elements."""
        return _DTYPES[self.inp_bits]

    @property
    def wgt_dtype(self) -> np.dtype:
        """NumPy type of weight elements."""
        return _DTYPES[self.wgt_bits]

    @property
    def acc_dtype(self) -> np.dtype:
        """NumPy type of accumulator elements."""
        return _DTYPES[self.acc_bits]

    @property
    def out_dtype(self) -> np.dtype:
        """NumPy type of elements stored through the narrowing OUT path."""
        return _DTYPES[self.out_bits]

    # --- tiles and buffer depths ------------------------------------------------
    @property
    def inp_tile_bytes(self) -> int:
        """Bytes of one ``batch x block_in`` input tile."""
        return self.batch * self.block_in * self.inp_bits // 8

    @property
    def wgt_tile_bytes(self) -> int:
        """Bytes of one ``block_out x block_in`` weight tile."""
        return self.block_out * self.block_in * self.wgt_bits // 8

    @property
    def acc_tile_bytes(self) -> int:
        """Bytes of one ``batch x block_out`` accumulator tile."""
        return self.batch * self.block_out * self.acc_bits // 8

    @property
    def out_tile_bytes(self) -> int:
        """Bytes of one ``batch x block_out`` output tile (narrowed accumulator)."""
        return self.batch * self.block_out * self.out_bits // 8

    @property
    def uop_depth(self) -> int:
        """Micro-ops the micro-op buffer holds."""
        return (1 << self.log_uop_buffer_bytes) // UOP_BYTES

    @property
    def inp_depth(self) -> int:
        """Input tiles the input buffer holds."""
        return (1 << self.log_inp_buffer_bytes) // self.inp_tile_bytes

    @property
    def wgt_depth(self) -> int:
        """Weight tiles the weight buffer holds."""
        return (1 << self.log_wgt_buffer_bytes) // self.wgt_tile_bytes

    @property
    def acc_depth(self) -> int:
        """Accumulator tiles the accumulator buffer holds."""
        return (1 << self.log_acc_buffer_bytes) // self.acc_tile_bytes

    # --- identity and persistence -----------------------------------------------
    @property
    def name(self) -> str:
        """Short string pinning every parameter the encoding and semantics depend on.

        Example: ``1x16x16_i8w8a32o8_15_15_18_17_b64q64`` (shape, element bits,
        log2 buffer bytes for uop/inp/wgt/acc, bus width and token-queue depth).
        """
        return (
            f"{self.batch}x{self.block_in}x{self.block_out}"
            f"_i{self.inp_bits}w{self.wgt_bits}a{self.acc_bits}o{self.out_bits}"
            f"_{self.log_uop_buffer_bytes}_{self.log_inp_buffer_bytes}"
            f"_{self.log_wgt_buffer_bytes}_{self.log_acc_buffer_bytes}"
            f"_b{self.bus_width_bits}q{self.token_queue_depth}"
        )

    @classmethod
    def from_name(cls, name: str) -> HardwareConfig:
        """Rebuild the config a :attr:`name` pins (timing parameters take defaults)."""
        match = _NAME_PATTERN.fullmatch(name)
        if match is None:
            raise AcceleratorError(
                f"{name!r} is not a hardware config name; expected the form "
                "'1x16x16_i8w8a32o8_15_15_18_17_b64q64'"
            )
        values = {key: int(text) for key, text in match.groupdict().items()}
        for key in ("batch", "block_in", "block_out"):
            extent = values.pop(key)
            if extent & (extent - 1) or extent == 0:
                raise AcceleratorError(f"config name {name!r}: {key} {extent} is not a power of 2")
            values[f"log_{key}"] = extent.bit_length() - 1
        return cls(**values)

    def to_dict(self) -> dict[str, int]:
        """All parameters as a JSON-ready dict (the inverse of :meth:`from_dict`)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, int]) -> HardwareConfig:
        """Build a config from a dict; missing keys take their defaults."""
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise AcceleratorError(
                f"unknown hardware config key(s) {unknown}; known keys are {sorted(known)}"
            )
        return cls(**values)

    def save_json(self, path: str | Path) -> None:
        """Write the config to a JSON file."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load_json(cls, path: str | Path) -> HardwareConfig:
        """Read a config written by :meth:`save_json` (or by hand)."""
        try:
            values = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise AcceleratorError(f"cannot read hardware config {path}: {exc}") from exc
        if not isinstance(values, dict):
            raise AcceleratorError(f"hardware config {path} must hold a JSON object")
        return cls.from_dict(values)

    @classmethod
    def preset(cls, shape: str) -> HardwareConfig:
        """One of the shipped configs: the shapes ``"1x8x8"``, ``"1x16x16"`` (default),
        ``"1x32x32"`` and ``"1x64x64"`` (larger buffers and a 128-bit memory port), and
        ``"pynq-z2"`` (1x16x16 sized for the xc7z020, docs/fpga.md)."""
        try:
            return cls(**_PRESETS[shape])
        except KeyError:
            raise AcceleratorError(
                f"no preset hardware config {shape!r}; choose one of {sorted(_PRESETS)}"
            ) from None


_NAME_PATTERN = re.compile(
    r"(?P<batch>\d+)x(?P<block_in>\d+)x(?P<block_out>\d+)"
    r"_i(?P<inp_bits>\d+)w(?P<wgt_bits>\d+)a(?P<acc_bits>\d+)o(?P<out_bits>\d+)"
    r"_(?P<log_uop_buffer_bytes>\d+)_(?P<log_inp_buffer_bytes>\d+)"
    r"_(?P<log_wgt_buffer_bytes>\d+)_(?P<log_acc_buffer_bytes>\d+)"
    r"_b(?P<bus_width_bits>\d+)q(?P<token_queue_depth>\d+)"
)

# The 1x8x8 preset halves the input/accumulator buffers and quarters the weight
# buffer so that buffer depths (and so the 32-bit micro-op) match the default.
_PRESETS: dict[str, dict[str, int]] = {
    "1x16x16": {},
    "1x8x8": {
        "log_block_in": 3,
        "log_block_out": 3,
        "log_inp_buffer_bytes": 14,
        "log_wgt_buffer_bytes": 16,
        "log_acc_buffer_bytes": 16,
    },
    "1x32x32": {"log_block_in": 5, "log_block_out": 5},
    # 4096 int8 multiply-accumulates a cycle, the size class of the large FPGA DPUs
    # (Xilinx's B4096 on a Zynq UltraScale+ does 2048 a cycle at 300 MHz and more,
    # data-center cards several times that). Buffers grown with the tiles so a layer's
    # tiling is like the 16x16's: 2048 input tiles of 64 B (128 KB), 128 weight tiles of
    # 4 KB (512 KB: a 3x3 layer of 128 channels in full), 1024 accumulator tiles of
    # 256 B (256 KB): about 0.9 MB on chip, what a ZU7-ZU9 part holds in block and
    # UltraRAM. The memory port is 128 bits wide (an UltraScale+ HP port) and moves
    # 16 bytes a cycle.
    "1x64x64": {"log_block_in": 6, "log_block_out": 6, "log_inp_buffer_bytes": 17,
                "log_wgt_buffer_bytes": 19, "log_acc_buffer_bytes": 18,
                "bus_width_bits": 128, "dram_bytes_per_cycle": 16},
    # The default shape on a PYNQ-Z2's xc7z020 within 80% of its block RAMs: half the
    # weight and accumulator buffers (the accumulator is held three times, once per read
    # port), 32 + 3 x 16 + 8 + 8 = 96 RAMB36 of 140 (docs/fpga.md); ResNet-18's cycles
    # grow 0.3%.
    "pynq-z2": {"log_wgt_buffer_bytes": 17, "log_acc_buffer_bytes": 16},
}


def _validate(config: HardwareConfig) -> None:
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise AcceleratorError(
                f"hardware config {field.name} must be an integer, got {value!r}"
            )
        if value < 0:
            raise AcceleratorError(f"hardware config {field.name} must be >= 0, got {value}")
    for key in ("inp_bits", "wgt_bits", "acc_bits", "out_bits"):
        if getattr(config, key) not in _DTYPES:
            raise AcceleratorError(
                f"hardware config {key}={getattr(config, key)}: supported widths are "
                f"{sorted(_DTYPES)}"
            )
    if config.inp_bits > 16 or config.wgt_bits > 16:
        raise AcceleratorError("hardware config: inputs and weights must be at most 16 bits wide")
    if config.bus_width_bits not in (32, 64, 128, 256, 512):
        raise AcceleratorError(
            f"hardware config bus_width_bits={config.bus_width_bits}: "
            "choose 32, 64, 128, 256 or 512"
        )
    for key in ("token_queue_depth", "dram_bytes_per_cycle", "clock_mhz",
                "link_mbytes_per_s", *WORK_BUDGET_KEYS):
        if getattr(config, key) < 1:
            raise AcceleratorError(f"hardware config {key} must be at least 1")
    for key in ("log_uop_buffer_bytes", "log_inp_buffer_bytes", "log_wgt_buffer_bytes",
                "log_acc_buffer_bytes"):
        # a config may come from a stream file's name: bound what the simulator allocates
        if getattr(config, key) > MAX_LOG_BUFFER_BYTES:
            raise AcceleratorError(
                f"hardware config {key}={getattr(config, key)}: on-chip buffers are at most "
                f"2**{MAX_LOG_BUFFER_BYTES} bytes"
            )
    for name, depth in (
        ("uop", config.uop_depth),
        ("inp", config.inp_depth),
        ("wgt", config.wgt_depth),
        ("acc", config.acc_depth),
    ):
        if depth < 1:
            raise AcceleratorError(
                f"hardware config: the {name} buffer (2**log_{name}_buffer_bytes bytes) "
                "is smaller than one tile; enlarge it"
            )
    # The ISA's field widths derive from the config, so deriving them here rejects
    # a config whose indices cannot be encoded (isa imports this module: import late).
    from .isa import isa_layout

    isa_layout(config)
