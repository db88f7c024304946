"""The ``heterocc accel`` command: tools for accelerator streams.

``heterocc accel disasm FILE`` prints a stream file readably; ``heterocc accel
check FILE`` runs the stream checker on it and, when it passes, the timing model.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import HeteroccError
from .checker import find_stream_errors
from .encoding import disassemble, read_stream_file
from .timing import schedule_stream


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


def main(argv: list[str] | None = None) -> int:
    """Run the ``accel`` command alone (``python -m heterocc.accel_sim.cli disasm FILE``)."""
    parser = argparse.ArgumentParser(prog="heterocc")
    add_accel_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["accel", *(sys.argv[1:] if argv is None else argv)])
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
