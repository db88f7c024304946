"""mkdocs hook: writes the CLI reference from the argument parser itself, so the page
cannot drift from the commands. A page containing the marker below gets, in its
place, the ``--help`` text of ``heterocc`` and of every sub-command (recursively)."""

from __future__ import annotations

import argparse

MARKER = "<!-- heterocc-cli-reference -->"
HELP_WIDTH = 96


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse exposes sub-parsers only through its actions
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_text(parser: argparse.ArgumentParser) -> str:
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=HELP_WIDTH)
    return parser.format_help().rstrip()


def _sections(parser: argparse.ArgumentParser, level: int) -> list[str]:
    sections = [f"{'#' * level} `{parser.prog}`\n\n```text\n{_help_text(parser)}\n```\n"]
    for child in _subcommands(parser).values():
        sections += _sections(child, min(level + 1, 4))
    return sections


def cli_reference() -> str:
    """Markdown of every command's help, ``heterocc`` first."""
    from heterocc.cli import build_parser

    return "\n".join(_sections(build_parser(), 2))


def on_page_markdown(markdown: str, **kwargs) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, cli_reference())
