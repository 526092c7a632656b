"""The command line read against :data:`nnix.cli.spec.ROOT`, the one declaration of every verb: argv to the verb and
its keyword arguments, ``--help`` pages, and usage errors (exit code 2, with "did you mean").

Help and errors keep the layout users know from the click/typer CLI this replaced: ``Usage:`` line, the help text
indented, ``Arguments:``, ``Options:`` and ``Commands:`` sections, wrapped to the terminal (at most 78 columns, at
least 50), ``[default: ...; required]`` after an option's help. Options are read as click reads them: ``--opt
value``, ``--opt=value``, ``-o value``, ``-ovalue``, short flags together (``-af``), ``--`` before positionals, the
last of a repeated option wins; a group's options come before its verb. Standard library only, and no ``re``: this
is all ``nnix --help`` imports."""

from __future__ import annotations

import os
import sys

from nnix.cli.spec import FLAG, FLOAT, INT, PATH, ROOT, Arg, Group, Opt, Verb

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

HELP = "--help"
HELP_TEXT = "Show this message and exit."
MAX_WIDTH = 80  # help is wrapped to the terminal's width, up to this
MIN_WIDTH = 50
COL_MAX = 30  # the widest first column of a definition list (longer ones go on a line of their own)
COL_SPACING = 2
_ASKED = "\0help"  # the key under which a --help seen is recorded, among the options' values


# --- the program's name and the terminal ------------------------------------------------------------------------


def prog_name() -> str:
    """The program's name in usage lines: ``nnix``, ``nnictl``, or ``python -m nnix.cli.main``."""
    path = sys.argv[0]
    package = getattr(sys.modules.get("__main__"), "__package__", None)
    if not package:
        return os.path.basename(path)
    name = os.path.splitext(os.path.basename(path))[0]
    return f"python -m {(package if name == '__main__' else f'{package}.{name}').lstrip('.')}"


def columns() -> int:
    """The terminal's width: $COLUMNS, else the terminal of stdout, else 80 (as shutil reads it, without shutil)."""
    try:
        width = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        width = 0
    if width <= 0:
        try:
            width = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            width = 0
    return width or 80


def help_width() -> int:
    return max(min(columns(), MAX_WIDTH) - 2, MIN_WIDTH)


# --- wrapping: textwrap's rules (words, whitespace, breaks after a hyphen inside a word), without re ------------

_SPACE = "\t\n\x0b\x0c\r "


def _word(c: str) -> bool:
    return c.isalnum() or c == "_"


def _letter(c: str) -> bool:
    return _word(c) and not c.isdigit()


def _before_dash(c: str) -> bool:
    return _word(c) or c in "!\"'&.,?"


def _dash_run(text: str, i: int) -> int:
    """Where the run of two or more hyphens at ``i`` ends, if a word character follows it (an em-dash), else -1."""
    j = i
    while j < len(text) and text[j] == "-":
        j += 1
    return j if j - i >= 2 and j < len(text) and _word(text[j]) else -1


def _hyphen_break(text: str, j: int) -> bool:
    """Whether a line may break after the hyphen at ``j``: two letters (or letter-hyphen-letter) before it, a
    letter then a letter (or hyphen-letter) after it."""
    n = len(text)
    before = (j >= 2 and _letter(text[j - 2]) and _letter(text[j - 1])) or (
        j >= 3 and _letter(text[j - 3]) and text[j - 2] == "-" and _letter(text[j - 1]))
    return before and j + 1 < n and _letter(text[j + 1]) and (
        (j + 2 < n and _letter(text[j + 2])) or (j + 3 < n and text[j + 2] == "-" and _letter(text[j + 3])))


def chunks(text: str) -> list[str]:
    """``text`` cut where a line may break: runs of whitespace, words, hyphenated words after each hyphen."""
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":  # words, one space apart
        out: list[str] = []
        for word in text.split(" "):
            if out:
                out.append(" ")
            if "-" in word:
                out += _cut(word)
            else:
                out.append(word)
        return out
    return _cut(text)


def _cut(text: str) -> list[str]:
    out = []
    i, n = 0, len(text)
    while i < n:
        if text[i] in _SPACE:
            j = i + 1
            while j < n and text[j] in _SPACE:
                j += 1
        elif text[i] == "-" and i > 0 and _before_dash(text[i - 1]) and _dash_run(text, i) > 0:
            j = _dash_run(text, i)
        else:
            j = i + 1
            while j < n and text[j] not in _SPACE:
                if text[j] == "-" and _hyphen_break(text, j):
                    j += 1
                    break
                if text[j] == "-" and _before_dash(text[j - 1]) and _dash_run(text, j) > 0:
                    break
                j += 1
        out.append(text[i:j])
        i = j
    return out


def wrap(text: str, width: int, initial_indent: str = "", subsequent_indent: str = "") -> list[str]:
    """The lines of ``text`` at most ``width`` wide (as ``textwrap.wrap`` makes them, whitespace kept as written
    within a line; a word longer than a line is cut)."""
    pending = chunks(text.expandtabs())[::-1]
    lines: list[str] = []
    while pending:
        indent = subsequent_indent if lines else initial_indent
        room = width - len(indent)
        if lines and not pending[-1].strip():
            pending.pop()
        line: list[str] = []
        used = 0
        while pending and used + len(pending[-1]) <= room:
            used += len(pending[-1])
            line.append(pending.pop())
        if pending and len(pending[-1]) > room:
            cut = max(room - used, 1)
            line.append(pending[-1][:cut])
            pending[-1] = pending[-1][cut:]
        if line and not line[-1].strip():
            line.pop()
        if line:
            lines.append(indent + "".join(line))
    return lines


def wrap_text(text: str, width: int, initial_indent: str = "", subsequent_indent: str = "",
              paragraphs: bool = False) -> str:
    """``text`` wrapped; with ``paragraphs``, each paragraph (blank-line separated, its lines joined) on its own,
    indented as its first line is."""
    if not paragraphs:
        return "\n".join(wrap(text, width, initial_indent, subsequent_indent))
    found: list[tuple[int, str]] = []
    lines: list[str] = []
    indent = 0
    for line in [*text.splitlines(), ""]:
        if not line:
            if lines:
                found.append((indent, " ".join(lines)))
            lines = []
            continue
        if not lines:
            indent = len(line) - len(line.lstrip())
            line = line.lstrip()
        lines.append(line)
    return "\n\n".join("\n".join(wrap(para, width, initial_indent + " " * extra, subsequent_indent + " " * extra))
                       for extra, para in found)


def short_help(text: str) -> str:
    """What a list of commands shows of a command's help: its first sentence."""
    words = text.split("\n\n", 1)[0].split()
    for i, word in enumerate(words):
        if word.endswith("."):
            return " ".join(words[: i + 1])
    return " ".join(words)


# --- help pages ----------------------------------------------------------------------------------------------------


class _Page:
    """A help page or a usage message, written as click's help formatter lays them out."""

    def __init__(self, width: int) -> None:
        self.width, self.indent = width, 0
        self.parts: list[str] = []

    def write(self, text: str) -> None:
        self.parts.append(text)

    def text(self) -> str:
        return "".join(self.parts)

    def usage(self, prog: str, args: str) -> None:
        prefix = f"{'Usage: ':>{self.indent}}{prog} "
        room = self.width - self.indent
        if room >= len(prefix) + 20:
            self.write(wrap_text(args, room, prefix, " " * len(prefix)))
        else:
            indent = " " * (max(self.indent, len("Usage: ")) + 4)
            self.write(prefix + "\n" + wrap_text(args, room, indent, indent))
        self.write("\n")

    def paragraph(self, text: str) -> None:
        self.write("\n")
        self.indent += 2
        pad = " " * self.indent
        self.write(wrap_text(text, self.width, pad, pad, paragraphs=True) + "\n")
        self.indent -= 2

    def section(self, heading: str, rows: list[tuple[str, str]]) -> None:
        self.write(f"\n{'':>{self.indent}}{heading}:\n")
        self.indent += 2
        first = min(max(len(name) for name, _ in rows), COL_MAX) + COL_SPACING
        for name, text in rows:
            self.write(f"{'':>{self.indent}}{name}")
            if not text:
                self.write("\n")
                continue
            if len(name) <= first - COL_SPACING:
                self.write(" " * (first - len(name)))
            else:
                self.write("\n" + " " * (first + self.indent))
            lines = wrap_text(text, max(self.width - first - 2, 10), paragraphs=True).splitlines()
            self.write((lines[0] if lines else "") + "\n")
            for line in lines[1:]:
                self.write(f"{'':>{first + self.indent}}{line}\n")
        self.indent -= 2


def _bound(value: float | str | None) -> float | None:
    """A number's bound as declared: a number, or ``"module:NAME"`` of a constant (imported only here)."""
    if isinstance(value, str):
        module, _, name = value.partition(":")
        found: float = getattr(__import__(module, fromlist=[name]), name)
        return found
    return value


def _range(param: Opt | Arg) -> str:
    if not isinstance(param, Opt) or (param.low is None and param.high is None):
        return ""
    low, high = _bound(param.low), _bound(param.high)
    if low is None:
        return f"x<={high}"
    if high is None:
        return f"x>={low}"
    return f"{low}<=x<={high}"


def _metavar(param: Opt | Arg) -> str:
    return f"<{param.kind} range>" if _range(param) else f"<{param.kind}>"


def _described(param: Opt | Arg) -> str:
    extra = []
    if isinstance(param, Opt) and param.kind != FLAG and param.default is not None:
        extra.append(f"default: {param.default}")
    if _range(param):
        extra.append(_range(param))
    if param.required:
        extra.append("required")
    notes = f"[{'; '.join(extra)}]" if extra else ""
    return f"{param.help}  {notes}" if param.help and notes else param.help or notes


def _spelled(opt: Opt) -> str:
    """``-c, --config <path>``: short spellings first, each kind in its declared order."""
    names = sorted(opt.names, key=lambda name: 1 if name.startswith("--") else 0)
    return ", ".join(names) + ("" if opt.kind == FLAG else f" {_metavar(opt)}")


def usage_args(node: Verb | Group) -> str:
    if isinstance(node, Group):
        return "[OPTIONS] COMMAND [ARGS]..."
    args = [f"{{{a.name}}}" if a.required else f"[{a.name}]" for a in node.params if isinstance(a, Arg)]
    return " ".join(["[OPTIONS]", *args])


def render_help(node: Verb | Group, path: str, width: int | None = None) -> str:
    """``PATH --help``."""
    page = _Page(help_width() if width is None else width)
    page.usage(path, usage_args(node))
    if node.help:
        page.paragraph(node.help)
    args = [(f"{a.name} {_metavar(a)}", _described(a)) for a in node.params if isinstance(a, Arg)]
    if args:
        page.section("Arguments", args)
    page.section("Options", [(_spelled(o), _described(o)) for o in node.params if isinstance(o, Opt) and not o.hidden]
                 + [(HELP, HELP_TEXT)])
    if isinstance(node, Group):
        commands = [(v.name, short_help(v.help)) for v in node.verbs if not v.hidden]
        if commands:
            page.section("Commands", commands)
    return page.text()


# --- reading argv ----------------------------------------------------------------------------------------------------


class _Missing:
    pass


MISSING = _Missing()


def fail(node: Verb | Group, path: str, message: str) -> NoReturn:
    """A usage error: the usage line, where help is, the error; exit code 2."""
    page = _Page(help_width())
    page.usage(path, usage_args(node))
    sys.stdout.flush()
    sys.stderr.write(f"{page.text()}Try '{path} {HELP}' for help.\n\nError: {message}\n")
    raise SystemExit(2)


def _close(word: str, candidates: list[str]) -> list[str]:
    """The candidates close to a mistyped word, closest first (case aside: ``TRIAL`` is close to ``trial``)."""
    import difflib  # (only for a mistake)

    lowered = {c.lower(): c for c in reversed(candidates)}
    return [lowered[c] for c in difflib.get_close_matches(word.lower(), list(lowered))]


def _no_such_option(node: Verb | Group, path: str, name: str) -> NoReturn:
    known = [n for o in node.params if isinstance(o, Opt) and not o.hidden for n in o.names] + [HELP]
    close = _close(name, known)
    fail(node, path, f"No such option: {name}" + (f". Did you mean {', '.join(close)}?" if close else ""))


def _read(node: Verb | Group, path: str, args: list[str]) -> tuple[dict[str, object], list[str], list[str]]:
    """Options and positionals (for a group: up to its first positional, its verb): ``({dest: raw value or True},
    positionals, dests in the order they were first given)``."""
    options = {name: o for o in node.params if isinstance(o, Opt) for name in o.names}
    values: dict[str, object] = {}
    order: list[str] = []

    def given(opt: Opt | None, name: str, value: object) -> None:
        dest = _ASKED if opt is None else opt.dest
        if dest not in values:
            order.append(dest)
        values[dest] = value

    def find(name: str) -> Opt | None:
        if name == HELP:
            return None
        opt = options.get(name)
        if opt is None:
            _no_such_option(node, path, name)
        return opt

    positionals: list[str] = []
    i = 0

    def following(name: str) -> str:
        """The value of ``name`` given as the next argument (``--opt value``, ``-o value``)."""
        nonlocal i
        if i == len(args):
            fail(node, path, f"Option '{name}' requires an argument.")
        i += 1
        return args[i - 1]

    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positionals += args[i:]
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            opt = find(name)
            if opt is None or opt.kind == FLAG:
                if eq:
                    fail(node, path, f"Option '{name}' does not take a value.")
                given(opt, name, True)
                continue
            given(opt, name, value if eq else following(name))
        elif arg.startswith("-") and len(arg) > 1:
            j = 1
            while j < len(arg):
                name = "-" + arg[j]
                j += 1
                opt = find(name)
                if opt is None or opt.kind == FLAG:
                    given(opt, name, True)
                    continue
                given(opt, name, arg[j:] or following(name))
                break
        elif isinstance(node, Group):
            positionals = args[i - 1:]
            break
        else:
            positionals.append(arg)
    return values, positionals, order


def _eager(node: Verb | Group, path: str, values: dict[str, object], order: list[str]) -> None:
    """``--help`` and the options that act at once (``--version``), in the order given."""
    for dest in order:
        if dest == _ASKED:
            sys.stdout.write(render_help(node, path))
            raise SystemExit(0)
        opt = next(o for o in node.params if isinstance(o, Opt) and o.dest == dest)
        if opt.action is not None:
            module, _, name = opt.action.partition(":")
            getattr(__import__(module, fromlist=[name]), name)()
            raise SystemExit(0)


def _label(param: Opt | Arg) -> str:
    return " / ".join(f"'{n}'" for n in param.names) if isinstance(param, Opt) else f"'{param.name}'"


def _number(text: str, kind: str) -> float | None:
    if kind == INT:
        digits = text[1:] if text[:1] in "+-" else text
        return int(text) if digits.isascii() and digits.isdigit() else None
    try:
        value = float(text)
    except ValueError:
        return None
    return None if value != value else value  # (NaN is no number of seconds)


def convert(node: Verb | Group, path: str, param: Opt | Arg, raw: object) -> object:
    """A value as the verb takes it (a bool, str, int, float or Path), or a usage error naming the option."""
    if raw is MISSING:
        raw = param.default if isinstance(param, Opt) else None
        if raw is None or param.kind == FLAG:
            return raw
    if param.kind == FLAG:
        return raw is True
    text = str(raw)
    if param.kind in (INT, FLOAT):
        value = _number(text, param.kind)
        if value is None:
            fail(node, path, f"Invalid value for {_label(param)}: {text!r} is not a valid "
                             f"{'integer' if param.kind == INT else 'float'}.")
        if isinstance(param, Opt):
            low, high = _bound(param.low), _bound(param.high)
            if (low is not None and value < low) or (high is not None and value > high):
                fail(node, path, f"Invalid value for {_label(param)}: {value} is not in the range {_range(param)}.")
        return value
    if param.kind == PATH:
        if os.path.exists(text) and not os.access(text, os.R_OK):
            fail(node, path, f"Invalid value for {_label(param)}: Path {text!r} is not readable.")
        from pathlib import Path

        return Path(text)
    return text


def parse(argv: list[str], prog: str) -> tuple[Verb, dict[str, object]]:
    """The verb ``argv`` names and its keyword arguments. Help, the version and usage errors are printed here and
    end the program (``SystemExit``: 0 for help, 2 for a mistake)."""
    node: Verb | Group = ROOT
    path, args = prog, argv
    while isinstance(node, Group):
        if not args:  # a group alone: its help, as a mistake
            sys.stderr.write(render_help(node, path))
            raise SystemExit(2)
        values, rest, order = _read(node, path, args)
        _eager(node, path, values, order)
        if not rest:
            fail(node, path, "Missing command.")
        child = node.find(rest[0])
        if child is None:
            close = _close(rest[0], [v.name for v in node.verbs if not v.hidden])
            fail(node, path, f"No such command {rest[0]!r}."
                 + (f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""))
        node, path, args = child, f"{path} {rest[0]}", rest[1:]
    values, positionals, order = _read(node, path, args)
    _eager(node, path, values, order)
    for arg in (p for p in node.params if isinstance(p, Arg)):  # positionals fill the arguments, after the options
        if positionals:
            values[arg.dest] = positionals.pop(0)
            order.append(arg.dest)
    rank = {dest: i for i, dest in enumerate(order)}
    kwargs: dict[str, object] = {}
    for param in sorted(node.params, key=lambda p: rank.get(p.dest, len(rank))):  # as given, then as declared
        raw = values.get(param.dest, MISSING)
        if raw is MISSING and param.required:
            kind = "option" if isinstance(param, Opt) else "argument"
            fail(node, path, f"Missing {kind} {_label(param)}.")
        kwargs[param.dest] = convert(node, path, param, raw)
    if positionals:
        fail(node, path, f"Got unexpected extra argument{'s' if len(positionals) > 1 else ''} "
                         f"({' '.join(positionals)})")
    return node, kwargs
