"""What the CLI prints, without click: the bytes ``typer.echo`` / ``typer.secho`` / ``typer.style`` give (ANSI
styles kept on a terminal, stripped on a pipe or a file), so that the verbs run without typer (``nnix --help``,
``trial ls``, ``stop``: :mod:`nnix.cli.main`) print what they print through it."""

from __future__ import annotations

import sys
from typing import TextIO

_CODES = {"bold": 1, "dim": 2, "red": 31, "yellow": 33}


def style(text: str, fg: str | None = None, bold: bool = False, dim: bool = False) -> str:
    codes = [_CODES[name] for name, on in (("bold", bold), ("dim", dim)) if on]
    if fg is not None:
        codes.insert(0, _CODES[fg])
    return "".join(f"\x1b[{c}m" for c in codes) + text + "\x1b[0m" if codes else text


def _plain(text: str) -> str:
    if "\x1b" not in text:
        return text
    import re

    return re.sub(r"\x1b\[[\d;]*[A-Za-z]", "", text)


def echo(message: str = "", err: bool = False) -> None:
    stream: TextIO = sys.stderr if err else sys.stdout
    stream.write((message if stream.isatty() else _plain(message)) + "\n")
    stream.flush()


def secho(message: str, err: bool = False, fg: str | None = None, bold: bool = False, dim: bool = False) -> None:
    echo(style(message, fg, bold, dim), err)
