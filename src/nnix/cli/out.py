"""What the CLI prints and asks: lines on stdout or stderr, ANSI styles kept on a terminal and stripped on a pipe or
a file (as click's echo does), and a yes/no question."""

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


def confirm(question: str) -> bool:
    """Ask ``question [y/N]`` on stdout, read the answer from stdin (yes/y or no/n, any case; nothing: no). No answer
    to be had (end of input, Ctrl-C): "Aborted!" and exit code 1."""
    while True:
        sys.stdout.write(f"{question} [y/N]: ")
        sys.stdout.flush()
        try:
            answer = input().strip().lower()
        except (EOFError, KeyboardInterrupt):
            echo()
            echo("Aborted!", err=True)
            raise SystemExit(1) from None
        if answer in ("y", "yes"):
            return True
        if answer in ("", "n", "no"):
            return False
        echo("Error: invalid input", err=True)
