"""The ``heterocc accel`` command: tools for accelerator streams.

``heterocc accel disasm FILE`` prints a stream file readably.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import HeteroccError
from .encoding import disassemble, read_stream_file


def add_accel_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``accel`` (with its ``disasm`` action) on a parent CLI's sub-parsers."""
    accel = subparsers.add_parser("accel", help="accelerator stream tools")
    actions = accel.add_subparsers(dest="accel_action", required=True)
    disasm = actions.add_parser("disasm", help="print an instruction stream file readably")
    disasm.add_argument("file", help="a stream file (see docs/isa.md, 'Stream files')")
    disasm.add_argument("--no-uops", action="store_true", help="leave out the micro-op listing")
    disasm.set_defaults(handler=run_disasm)
    return accel


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


def main(argv: list[str] | None = None) -> int:
    """Run the ``accel`` command alone (``python -m heterocc.accel_sim.cli disasm FILE``)."""
    parser = argparse.ArgumentParser(prog="heterocc")
    add_accel_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["accel", *(sys.argv[1:] if argv is None else argv)])
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
