"""`nnix` (alias `nnictl`): NNI's verbs and flags. The verbs are typer commands (:mod:`nnix.cli.commands`), but
typer's import (and the pydantic it converts parameters with) is most of a quick verb's start-up: ``nnix --help``
and plain spellings of ``trial ls``, ``stop``, ``create``, ``resume`` and ``view`` run here without it, with the
same output; anything else (another verb, a verb's --help, an unusual spelling, a mistake) goes to typer."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing, and what nnix.cli.quick imports, are more than `nnix --help` itself costs)
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

ROOT_HELP_MIN_COLUMNS = 80  # narrower, click wraps the root help differently: typer prints it


def __getattr__(name: str) -> Any:  # the typer app and its commands, where they were before (nnix.cli.main.app)
    if name.startswith("__"):
        raise AttributeError(name)
    from nnix.cli import commands

    return getattr(commands, name)


def _prog_name() -> str:
    """The program's name as click shows it in the usage line (``nnix``, or ``python -m nnix.cli.main``)."""
    path = sys.argv[0]
    package = getattr(sys.modules.get("__main__"), "__package__", None)
    if not package:
        return os.path.basename(path)
    name = os.path.splitext(os.path.basename(path))[0]
    return f"python -m {(package if name == '__main__' else f'{package}.{name}').lstrip('.')}"


def _columns() -> int:
    """The terminal's width as click reads it (shutil.get_terminal_size's, without importing shutil)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def _root_help() -> None:
    from nnix.cli.roothelp import TEXT

    sys.stdout.write(TEXT.format(prog=_prog_name()))


def _int(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and (text == "0" or not text.startswith("0")) else None


def _parse(args: list[str], flags: dict[str, str], valued: dict[str, str], ints: tuple[str, ...] = ()
           ) -> dict[str, Any] | None:
    """``args`` as click would read them, where that is plain: at most one positional (no leading ``-``, as
    ``arg``), each flag and option at most once, option values that do not start with ``-`` (``--tail 10``,
    ``--tail=10``), the ``ints`` ones non-negative integers. None for anything else, which typer parses (and
    explains, for a mistake)."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if not arg.startswith("-"):
            key, value = "arg", arg
        elif name in flags and not eq:
            key, value = flags[name], "1"
        elif name in valued:
            key = valued[name]
            if not eq:
                i += 1
                if i == len(args):
                    return None
                value = args[i]
            if (_int(value) is None) if key in ints else (not value or value.startswith("-")):
                return None
        else:
            return None
        if key in out:
            return None
        out[key] = int(value) if key in ints else value
        i += 1
    return out


def _readable(path: str | None) -> bool:
    """Whether typer would take this path (it refuses one that exists but cannot be read)."""
    return path is None or not os.path.exists(path) or os.access(path, os.R_OK)


def _path(text: str) -> Path:
    from pathlib import Path

    return Path(text)


def _quick(args: list[str]) -> Callable[[], None] | None:
    """The verb to run without typer, or None."""
    if args == ["--help"]:
        return _root_help if _columns() >= ROOT_HELP_MIN_COLUMNS else None
    from nnix.cli import quick

    if args[:2] == ["trial", "ls"]:
        ls = _parse(args[2:], {"--json": "json"}, {"--head": "head", "--tail": "tail"}, ("head", "tail"))
        if ls is not None:
            return lambda: quick.trial_ls(ls.get("arg"), ls.get("head"), ls.get("tail"), "json" in ls)
    if args[:1] == ["stop"]:
        st = _parse(args[1:], {"--all": "all", "-a": "all"}, {"--port": "port", "-p": "port"}, ("port",))
        if st is not None:
            return lambda: quick.stop(st.get("arg"), "all" in st, st.get("port"))
    start = {"--port": "port", "-p": "port", "--host": "host"}
    if args[:1] == ["create"]:
        cr = _parse(args[1:], {"--debug": "debug", "-d": "debug", "--foreground": "fg", "-f": "fg"},
                    {**start, "--config": "config", "-c": "config", "--url_prefix": "url", "--url-prefix": "url",
                     "-u": "url", "--id": "id"}, ("port",))
        if cr is not None and "config" in cr and "arg" not in cr and _readable(cr["config"]):
            return lambda: quick.create(_path(cr["config"]), cr.get("port", quick.DEFAULT_PORT),
                                        cr.get("host", quick.DEFAULT_HOST), "debug" in cr, "fg" in cr, cr.get("url"),
                                        cr.get("id"))
    if args[:1] in (["resume"], ["view"]):
        flags = {"--debug": "debug", "-d": "debug", "--foreground": "fg", "-f": "fg"} if args[0] == "resume" else {}
        rv = _parse(args[1:], flags, {**start, "--experiment_dir": "dir", "--experiment-dir": "dir", "-e": "dir"},
                    ("port",))
        if rv is not None and "arg" in rv and _readable(rv.get("dir")):
            exp, port, host = rv["arg"], rv.get("port", quick.DEFAULT_PORT), rv.get("host", quick.DEFAULT_HOST)
            where = None if rv.get("dir") is None else _path(rv["dir"])
            if args[0] == "resume":
                return lambda: quick.resume(exp, port, host, "fg" in rv, where)
            return lambda: quick.view(exp, port, host, where)
    return None


def _finish(verb: Callable[[], None]) -> None:
    try:
        verb()
        sys.stdout.flush()
    except BrokenPipeError:  # a pipe closed early (`| head`): as click, exit 1 without a traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    sys.exit(0)


def main() -> None:
    if os.path.basename(sys.argv[0]) == "nnictl" and "--version" not in sys.argv and "-v" not in sys.argv:
        from nnix.cli.quick import note_real_nni

        note_real_nni()  # this `nnictl` is nnix's: say so where NNI's could be expected
    if sys.argv[1:2] == ["create"] or sys.argv[1:3] == ["trial", "ls"]:
        from nnix.host.collector import hold

        hold()  # over the imports: `create` resumes it once its first trial runs; `trial ls` ends first
    verb = _quick(sys.argv[1:])
    if verb is _root_help:
        _finish(verb)
    from nnix.cli.quick import err
    from nnix.errors import NnixError

    try:
        if verb is None:
            from nnix.cli.commands import app

            app()
            return
        _finish(verb)
    except NnixError as e:
        err(f"error: {e.message}")
        if e.hint:
            from nnix.cli.out import secho

            secho(f"  hint: {e.hint}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)

if __name__ == "__main__":
    main()
