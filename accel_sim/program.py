"""A small builder for accelerator programs: tensors packed into a DRAM image,
micro-op kernels, and an instruction list.

The compiler, the hand-written tests and the RTL test benches all describe
programs with it::

    builder = ProgramBuilder(config)
    a = builder.tensor("A", Buffer.INP, data=a_matrix)
    kernel = builder.uops("k", [MicroOp(dst=0, src=k, wgt=k) for k in range(4)])
    builder.emit(builder.load_uops(kernel, sram_base=0))
    builder.emit(builder.load_tiles(a, sram_base=0, row=0, col=0, rows=1, cols=4))
    ...
    program = builder.build()
    program.run()
    result = program.read("C")

A DRAM tensor is a matrix stored as a row-major grid of row-major tiles of its
buffer's tile shape, so tile ``(r, c)`` sits at tile address
``tile_base + r * grid_cols + c``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import AcceleratorError
from .config import HardwareConfig
from .encoding import encode_uops
from .isa import Buffer, Finish, Instruction, Load, MicroOp, Store, dram_unit_bytes
from .simulator import RunReport, run_stream

#: every tensor starts on a multiple of this many bytes (and of its tile size).
DRAM_ALIGNMENT = 64


def tile_shape(config: HardwareConfig, buffer: Buffer) -> tuple[int, int]:
    """Rows and columns of elements in one tile of ``buffer`` (1 x 1 for UOP and LUT
    words)."""
    return {
        Buffer.UOP: (1, 1),
        Buffer.LUT: (1, 1),
        Buffer.INP: (config.batch, config.block_in),
        Buffer.WGT: (config.block_out, config.block_in),
        Buffer.ACC: (config.batch, config.block_out),
        Buffer.OUT: (config.batch, config.block_out),
    }[buffer]


def element_dtype(config: HardwareConfig, buffer: Buffer) -> np.dtype:
    """Little-endian element type of ``buffer``'s tiles in DRAM."""
    dtype = {
        Buffer.UOP: np.dtype(np.uint32),
        Buffer.LUT: np.dtype(np.uint32),
        Buffer.INP: config.inp_dtype,
        Buffer.WGT: config.wgt_dtype,
        Buffer.ACC: config.acc_dtype,
        Buffer.OUT: config.out_dtype,
    }[buffer]
    return dtype.newbyteorder("<")


def _require_tileable(rows: int, cols: int, tile_rows: int, tile_cols: int) -> None:
    if rows % tile_rows or cols % tile_cols:
        raise AcceleratorError(
            f"a {rows}x{cols} matrix does not split into {tile_rows}x{tile_cols} tiles; "
            "pad it to multiples of the tile shape"
        )


def pack_tiles(matrix: np.ndarray, tile_rows: int, tile_cols: int) -> np.ndarray:
    """Reorder a matrix into its DRAM tile order: shape (grid_rows, grid_cols, tr, tc)."""
    rows, cols = matrix.shape
    _require_tileable(rows, cols, tile_rows, tile_cols)
    grid = matrix.reshape(rows // tile_rows, tile_rows, cols // tile_cols, tile_cols)
    return np.ascontiguousarray(grid.transpose(0, 2, 1, 3))


def unpack_tiles(tiles: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_tiles`."""
    grid_rows, grid_cols, tile_rows, tile_cols = tiles.shape
    return tiles.transpose(0, 2, 1, 3).reshape(grid_rows * tile_rows, grid_cols * tile_cols)


@dataclass(frozen=True)
class DramTensor:
    """A matrix of one buffer's element type, tiled, at a DRAM byte address."""

    name: str
    buffer: Buffer
    byte_address: int
    rows: int
    cols: int
    tile_rows: int
    tile_cols: int
    unit_bytes: int

    @property
    def grid_rows(self) -> int:
        """Rows of tiles."""
        return self.rows // self.tile_rows

    @property
    def grid_cols(self) -> int:
        """Tiles per row (the x_stride of a transfer that walks rows of tiles)."""
        return self.cols // self.tile_cols

    @property
    def nbytes(self) -> int:
        """Bytes the tensor occupies in DRAM."""
        return self.grid_rows * self.grid_cols * self.unit_bytes

    @property
    def tile_base(self) -> int:
        """Address of the first tile, in tiles (the unit of a transfer's dram_base)."""
        return self.byte_address // self.unit_bytes

    def tile(self, row: int, col: int) -> int:
        """Tile address of tile (row, col)."""
        if not (0 <= row < self.grid_rows and 0 <= col < self.grid_cols):
            raise AcceleratorError(
                f"tile ({row}, {col}) is outside tensor {self.name!r}'s "
                f"{self.grid_rows}x{self.grid_cols} tile grid"
            )
        return self.tile_base + row * self.grid_cols + col


@dataclass
class Program:
    """An instruction stream with the DRAM image it runs against."""

    config: HardwareConfig
    instructions: list[Instruction]
    dram: np.ndarray
    tensors: dict[str, DramTensor]
    uops: list[MicroOp] = field(default_factory=list)

    def run(self, check: bool = True) -> RunReport:
        """Simulate the program on its own DRAM image (updated in place)."""
        return run_stream(self.instructions, self.config, self.dram, check=check)

    def read(self, name: str, dram: np.ndarray | None = None) -> np.ndarray:
        """The matrix a tensor holds now (in ``dram``, by default the program's image)."""
        tensor = self.tensors[name]
        return read_tensor(self.config, tensor, self.dram if dram is None else dram)

    def write(self, name: str, matrix: np.ndarray, dram: np.ndarray | None = None) -> None:
        """Lay ``matrix`` out as tensor ``name``'s tiles in ``dram`` (by default the
        program's image), e.g. a new input before another run."""
        tensor = self.tensors[name]
        packed = pack_tiles(np.asarray(matrix, element_dtype(self.config, tensor.buffer)),
                            tensor.tile_rows, tensor.tile_cols).tobytes()
        target = self.dram if dram is None else dram
        target[tensor.byte_address: tensor.byte_address + len(packed)] = np.frombuffer(
            packed, np.uint8)


def tensor_matrix(config: HardwareConfig, tensor: DramTensor, raw: np.ndarray) -> np.ndarray:
    """The matrix a tensor's own bytes ``raw`` (from its first tile on, e.g. what a
    device's read returned) hold: a view of them where the tiles are the matrix's rows
    (one-row tiles: the batch-1 configs), else their tiles unpacked into a new array."""
    tiles = raw[:tensor.nbytes].view(element_dtype(config, tensor.buffer)).reshape(
        tensor.grid_rows, tensor.grid_cols, tensor.tile_rows, tensor.tile_cols
    )
    native = element_dtype(config, tensor.buffer).newbyteorder("=")
    return unpack_tiles(tiles).astype(native, copy=False)


def read_tensor(config: HardwareConfig, tensor: DramTensor, dram: np.ndarray) -> np.ndarray:
    """Unpack a tensor's matrix from a DRAM byte array (a new array: later writes to
    ``dram`` do not change it)."""
    matrix = tensor_matrix(config, tensor, dram[tensor.byte_address:])
    return matrix.copy() if np.may_share_memory(matrix, dram) else matrix


class ProgramBuilder:
    """Collects tensors, micro-op kernels and instructions into a :class:`Program`."""

    def __init__(self, config: HardwareConfig):
        self.config = config
        self.instructions: list[Instruction] = []
        self._tensors: dict[str, DramTensor] = {}
        self._contents: dict[str, bytes] = {}
        self._uops: list[MicroOp] = []
        self._next_address = 0

    def tensor(
        self,
        name: str,
        buffer: Buffer,
        data: np.ndarray | None = None,
        shape: tuple[int, int] | None = None,
    ) -> DramTensor:
        """Place a matrix in DRAM: ``data`` packs its contents, ``shape`` reserves zeros."""
        if name in self._tensors:
            raise AcceleratorError(f"tensor {name!r} is already defined in this program")
        if (data is None) == (shape is None):
            raise AcceleratorError(f"tensor {name!r}: give exactly one of data and shape")
        rows, cols = np.shape(data) if data is not None else shape
        tile_rows, tile_cols = tile_shape(self.config, buffer)
        _require_tileable(rows, cols, tile_rows, tile_cols)
        unit = dram_unit_bytes(self.config, buffer)
        address = -(-self._next_address // max(unit, DRAM_ALIGNMENT)) * max(unit, DRAM_ALIGNMENT)
        tensor = DramTensor(name, buffer, address, rows, cols, tile_rows, tile_cols, unit)
        if data is not None:
            matrix = np.asarray(data)
            dtype = element_dtype(self.config, buffer)
            if not np.array_equal(matrix.astype(dtype), matrix):
                raise AcceleratorError(
                    f"tensor {name!r} holds values that do not fit {dtype.name} "
                    f"({buffer.name} elements)"
                )
            self._contents[name] = pack_tiles(matrix.astype(dtype), tile_rows, tile_cols).tobytes()
        self._tensors[name] = tensor
        self._next_address = address + tensor.nbytes
        return tensor

    def uops(self, name: str, uops: Sequence[MicroOp]) -> DramTensor:
        """Place a micro-op kernel in DRAM (a column of 32-bit words)."""
        words = encode_uops(uops, self.config)
        tensor = self.tensor(name, Buffer.UOP, data=words.reshape(-1, 1))
        self._uops.extend(uops)
        return tensor

    def load_tiles(
        self,
        tensor: DramTensor,
        sram_base: int,
        row: int,
        col: int,
        rows: int,
        cols: int,
        pads: tuple[int, int, int, int] = (0, 0, 0, 0),
        pad_value: int = 0,
        **flags: bool,
    ) -> Load:
        """A LOAD of ``rows x cols`` tiles of ``tensor`` from tile (row, col).

        ``pads`` is (top, bottom, left, right) in tiles, filled with ``pad_value``;
        ``flags`` are dependency flags.
        """
        top, bottom, left, right = pads
        return Load(
            buffer=tensor.buffer, sram_base=sram_base, dram_base=tensor.tile(row, col),
            y_size=rows, x_size=cols, x_stride=tensor.grid_cols,
            y_pad_top=top, y_pad_bottom=bottom, x_pad_left=left, x_pad_right=right,
            pad_value=pad_value, **flags,
        )

    def load_uops(self, kernel: DramTensor, sram_base: int = 0, **flags: bool) -> Load:
        """A LOAD of a whole micro-op kernel into the micro-op buffer."""
        return Load(
            buffer=Buffer.UOP, sram_base=sram_base, dram_base=kernel.tile_base,
            y_size=1, x_size=kernel.rows, x_stride=kernel.rows, **flags,
        )

    def store_tiles(
        self, tensor: DramTensor, sram_base: int, row: int, col: int, rows: int, cols: int,
        **flags: bool,
    ) -> Store:
        """A STORE of ``rows x cols`` accumulator tiles into ``tensor`` at tile (row, col)."""
        return Store(
            buffer=tensor.buffer, sram_base=sram_base, dram_base=tensor.tile(row, col),
            y_size=rows, x_size=cols, x_stride=tensor.grid_cols, **flags,
        )

    def emit(self, instruction: Instruction) -> int:
        """Append an instruction; returns its index."""
        self.instructions.append(instruction)
        return len(self.instructions) - 1

    def finish(self, **flags: bool) -> int:
        """Append the closing FINISH."""
        return self.emit(Finish(**flags))

    def build(self) -> Program:
        """The program, with a DRAM image holding every tensor."""
        dram = np.zeros(-(-self._next_address // DRAM_ALIGNMENT) * DRAM_ALIGNMENT, np.uint8)
        for name, content in self._contents.items():
            address = self._tensors[name].byte_address
            dram[address : address + len(content)] = np.frombuffer(content, np.uint8)
        return Program(
            self.config, list(self.instructions), dram, dict(self._tensors), list(self._uops)
        )
