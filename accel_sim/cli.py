"""The ``heterocc accel`` command: tools for accelerator streams and hardware.

``heterocc accel disasm FILE`` prints a stream file readably; ``heterocc accel
check FILE`` runs the stream checker on it and, when it passes, the timing model;
``heterocc accel fit --part xc7z020`` synthesizes a config with Yosys and checks it
against an FPGA part; ``heterocc accel vivado`` writes the Vivado/PYNQ build files.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from ..errors import HeteroccError
from .checker import find_stream_errors
from .config import HardwareConfig
from .encoding import disassemble, read_stream_file
from .fpga_fit import DEFAULT_LIMIT, PARTS, fit
from .timing import schedule_stream
from .vivado import write_vivado_project


def add_accel_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``accel`` (with its ``disasm`` action) on a parent CLI's sub-parsers."""
    accel = subparsers.add_parser("accel", help="accelerator stream tools")
    actions = accel.add_subparsers(dest="accel_action", required=True)
    disasm = actions.add_parser("disasm", help="print an instruction stream file readably")
    disasm.add_argument("file", help="a stream file (see docs/isa.md, 'Stream files')")
    disasm.add_argument("--no-uops", action="store_true", help="leave out the micro-op listing")
    disasm.set_defaults(handler=run_disasm)
    check = actions.add_parser("check", help="check a stream file and report its timing")
    check.add_argument("file", help="a stream file")
    check.add_argument(
        "--dram-bytes", type=int, default=None, help="also check DRAM ranges against this size"
    )
    check.set_defaults(handler=run_check)
    fit_parser = actions.add_parser(
        "fit", help="synthesize a config with Yosys and check it against an FPGA part")
    add_config_arguments(fit_parser)
    fit_parser.add_argument("--part", default="xc7z020", choices=sorted(PARTS))
    fit_parser.add_argument("--limit", type=float, default=DEFAULT_LIMIT,
                            help="largest share of each resource that fits (default 0.8)")
    fit_parser.add_argument("--json", action="store_true", help="print the fit as JSON")
    fit_parser.set_defaults(handler=run_fit)
    vivado = actions.add_parser(
        "vivado", help="write the Vivado project, bitstream and PYNQ overlay scripts of a config")
    add_config_arguments(vivado)
    vivado.add_argument("--part", default="xc7z020", choices=sorted(PARTS))
    vivado.add_argument("--clock-mhz", type=int, help="the clock (default: the config's)")
    vivado.add_argument("-o", "--output", required=True, help="folder to write")
    vivado.set_defaults(handler=run_vivado)
    return accel


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """``--preset NAME`` or ``--config JSON``: the hardware config a command works on."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", default="1x16x16",
                        help="a preset config (1x8x8, 1x16x16, 1x32x32, pynq-z2)")
    source.add_argument("--config", help="a HardwareConfig JSON file")


def config_from_arguments(args: argparse.Namespace) -> HardwareConfig:
    """The config ``--preset`` / ``--config`` name."""
    if args.config:
        return HardwareConfig.load_json(args.config)
    return HardwareConfig.preset(args.preset)


def run_fit(args: argparse.Namespace) -> int:
    """Print the fit of the config on ``args.part``; exit 0 when it fits, 1 when not."""
    try:
        result = fit(config_from_arguments(args), args.part, args.limit)
    except HeteroccError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_dict(), indent=1) if args.json else result.table())
    return 0 if result.fits else 1


def run_disasm(args: argparse.Namespace) -> int:
    """Print the disassembly of ``args.file``; returns the exit status."""
    try:
        stream = read_stream_file(args.file)
    except HeteroccError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    uops = () if args.no_uops else stream.uops
    print(disassemble(stream.instructions, uops, title=f"{args.file}: {stream.config.name}"))
    return 0


def run_check(args: argparse.Namespace) -> int:
    """Print every problem in ``args.file`` (exit 1), or its timing report (exit 0).

    The timing report uses default timing parameters: a stream file pins its
    config by name, and the name leaves timing out.
    """
    try:
        stream = read_stream_file(args.file)
    except HeteroccError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    errors = find_stream_errors(stream.instructions, stream.config, args.dram_bytes)
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    if errors:
        return 1
    print(f"{args.file}: {len(stream.instructions)} instructions, valid for {stream.config.name}")
    print(schedule_stream(stream.instructions, stream.config).summary())
    return 0


def run_vivado(args: argparse.Namespace) -> int:
    """Write the Vivado/PYNQ build folder (``accel_sim.vivado``) and list its files."""
    try:
        config = config_from_arguments(args)
        if args.clock_mhz is not None:
            config = dataclasses.replace(config, clock_mhz=args.clock_mhz)
        files = write_vivado_project(config, args.part, Path(args.output))
    except HeteroccError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{config.name} at {config.clock_mhz} MHz on {PARTS[args.part].vivado_part}: "
          f"{len(files)} files in {args.output}")
    print(f"next, where Vivado is installed: cd {args.output} && vivado -mode batch -source "
          "create_project.tcl && vivado -mode batch -source build_bitstream.tcl")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the ``accel`` command alone (``python -m heterocc.accel_sim.cli disasm FILE``)."""
    parser = argparse.ArgumentParser(prog="heterocc")
    add_accel_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["accel", *(sys.argv[1:] if argv is None else argv)])
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
