"""The Verilog configuration header of the accelerator RTL, generated from a
:class:`HardwareConfig` so that the RTL, the ISA encoder and the simulator cannot drift.

The header (``hc_config.vh``) holds only ``define`` macros: shapes, element
widths, buffer depths and index widths, bus geometry, and the bit position of
every instruction and micro-op field taken from :func:`isa_layout`.

Run ``python -m heterocc.accel_sim.rtl_header OUT.vh [--config JSON | --preset SHAPE]``
to write one by hand; the test benches and the RTL transport call
:func:`write_rtl_header`.
"""

from __future__ import annotations

import argparse
import zlib
from pathlib import Path

import jinja2

from ..errors import AcceleratorError
from .config import UOP_BYTES, HardwareConfig
from .isa import Buffer, Opcode, dram_unit_bytes, index_bits, isa_layout

#: the folder of the RTL sources and of the header template.
RTL_DIR = Path(__file__).resolve().parents[1] / "hw" / "rtl"
TEMPLATE_NAME = "hc_config.vh.j2"
HEADER_NAME = "hc_config.vh"

#: instructions each module's command queue holds (an RTL-only parameter: the
#: ISA assumes the fetcher is never the bottleneck, which deep queues approximate).
DEFAULT_COMMAND_QUEUE_DEPTH = 64

#: the 128-bit instruction word must split into whole bus beats.
_INSTRUCTION_BYTES = 16


def config_id(config: HardwareConfig) -> int:
    """The 32-bit ID register value of an RTL build for ``config`` (CRC-32 of its name)."""
    return zlib.crc32(config.name.encode("ascii"))


def check_rtl_support(config: HardwareConfig) -> None:
    """Raise AcceleratorError when the RTL cannot be built for ``config``.

    The DMA engines move whole bus beats, so every tile must be a whole number of
    beats, an instruction word too, and a beat must hold whole micro-op words.
    """
    bus_bytes = config.bus_width_bits // 8
    if bus_bytes > _INSTRUCTION_BYTES:
        raise AcceleratorError(
            f"config {config.name}: the RTL fetches an instruction as whole bus beats, so "
            f"bus_width_bits must be at most 128 (got {config.bus_width_bits})"
        )
    for buffer in (Buffer.INP, Buffer.WGT, Buffer.ACC, Buffer.OUT):
        unit = dram_unit_bytes(config, buffer)
        if unit % bus_bytes:
            raise AcceleratorError(
                f"config {config.name}: a {buffer.name} tile is {unit} bytes, not a whole "
                f"number of {bus_bytes}-byte bus beats; use a narrower bus or larger tiles"
            )
    if bus_bytes < UOP_BYTES:
        raise AcceleratorError(f"config {config.name}: the bus must hold a 32-bit micro-op")


def _log2(value: int) -> int:
    return value.bit_length() - 1


def _scalars(config: HardwareConfig, command_queue_depth: int) -> list[tuple[str, int]]:
    bus_bytes = config.bus_width_bits // 8
    depths = {
        "UOP": config.uop_depth,
        "INP": config.inp_depth,
        "WGT": config.wgt_depth,
        "ACC": config.acc_depth,
    }
    scalars = [
        ("LOG_BATCH", config.log_batch),
        ("LOG_BLOCK_IN", config.log_block_in),
        ("LOG_BLOCK_OUT", config.log_block_out),
        ("BATCH", config.batch),
        ("BLOCK_IN", config.block_in),
        ("BLOCK_OUT", config.block_out),
        ("INP_BITS", config.inp_bits),
        ("WGT_BITS", config.wgt_bits),
        ("ACC_BITS", config.acc_bits),
        ("OUT_BITS", config.out_bits),
    ]
    for name, depth in depths.items():
        scalars += [(f"{name}_DEPTH", depth), (f"{name}_IDX_BITS", index_bits(depth))]
    for buffer in (Buffer.INP, Buffer.WGT, Buffer.ACC, Buffer.OUT):
        unit = dram_unit_bytes(config, buffer)
        scalars += [
            (f"{buffer.name}_TILE_BITS", unit * 8),
            (f"{buffer.name}_TILE_BEATS", unit // bus_bytes),
            (f"{buffer.name}_LOG_UNIT_BYTES", _log2(unit)),
        ]
    scalars += [
        ("UOP_LOG_UNIT_BYTES", _log2(UOP_BYTES)),
        ("BUS_BITS", config.bus_width_bits),
        ("BUS_BYTES", bus_bytes),
        ("LOG_BUS_BYTES", _log2(bus_bytes)),
        ("UOPS_PER_BEAT", bus_bytes // UOP_BYTES),
        ("INSN_BEATS", _INSTRUCTION_BYTES // bus_bytes),
        ("TOKEN_QUEUE_DEPTH", config.token_queue_depth),
        ("TOKEN_COUNT_BITS", config.token_queue_depth.bit_length()),
        ("CMD_QUEUE_DEPTH", command_queue_depth),
        ("CMD_QUEUE_IDX_BITS", index_bits(command_queue_depth)),
    ]
    return scalars


def rtl_header_text(
    config: HardwareConfig, command_queue_depth: int = DEFAULT_COMMAND_QUEUE_DEPTH
) -> str:
    """The text of ``hc_config.vh`` for ``config``."""
    check_rtl_support(config)
    if command_queue_depth < 2 or command_queue_depth & (command_queue_depth - 1):
        raise AcceleratorError(
            f"command_queue_depth must be a power of two >= 2, got {command_queue_depth}"
        )
    layout = isa_layout(config)
    formats = [
        ("DMA", layout.fields(Opcode.LOAD)),
        ("GEMM", layout.fields(Opcode.GEMM)),
        ("ALU", layout.fields(Opcode.ALU)),
    ]
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(RTL_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    return environment.get_template(TEMPLATE_NAME).render(
        name=config.name,
        config_id=config_id(config),
        scalars=_scalars(config, command_queue_depth),
        instruction_fields=formats,
        uop_fields=layout.uop,
    )


def write_rtl_header(
    config: HardwareConfig,
    directory: str | Path,
    command_queue_depth: int = DEFAULT_COMMAND_QUEUE_DEPTH,
) -> Path:
    """Write ``hc_config.vh`` for ``config`` into ``directory`` (created); returns its path.

    The file is rewritten only when its text changes, so simulator builds that
    depend on it are not redone needlessly.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / HEADER_NAME
    text = rtl_header_text(config, command_queue_depth)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def rtl_sources() -> list[Path]:
    """The Verilog sources of the accelerator, top level last."""
    return sorted(RTL_DIR.glob("hc_*.v"), key=lambda path: path.name == "hc_top.v")


def main(argv: list[str] | None = None) -> None:
    """Command-line entry: write a header for a preset or a JSON config."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir", help="folder to write hc_config.vh into")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", help="HardwareConfig JSON file")
    source.add_argument("--preset", default="1x16x16", help="preset shape (default 1x16x16)")
    args = parser.parse_args(argv)
    config = (
        HardwareConfig.load_json(args.config) if args.config else HardwareConfig.preset(args.preset)
    )
    print(write_rtl_header(config, args.output_dir))


if __name__ == "__main__":
    main()
