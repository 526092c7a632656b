"""Reading user documents (config and search-space files) within :mod:`nnix.limits`.

* :func:`read_text` reads at most :data:`~nnix.limits.MAX_FILE_BYTES`, as UTF-8, and says what is wrong
  with a missing, unreadable, binary or huge file.
* :func:`load_yaml` parses YAML with libyaml's event parser (when installed: about 30 times faster than
  the pure-Python one) and a composer of our own that refuses, with the line and the key path, what
  PyYAML accepts silently or chokes on: nesting deeper than :data:`~nnix.limits.MAX_DEPTH` (a
  ``RecursionError`` otherwise), more than :data:`~nnix.limits.MAX_VALUES` values counting each alias as
  the values it stands for (a "billion laughs" document otherwise expands without end in whatever walks
  it), an alias of a node inside itself, and duplicate keys (PyYAML keeps the last one).
* :func:`load_json` does the same for JSON (duplicate keys, depth, size, integers too long to read).

Each raises :class:`DocumentError`; the callers turn it into their own typed error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import (
    AliasEvent,
    Event,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from nnix import limits
from nnix.limits import brief, dotted

__all__ = ["DocumentError", "load_json", "load_yaml", "read_text"]


class DocumentError(Exception):
    """A document that cannot be read or is out of bounds: where (key path, line) and what."""

    def __init__(self, message: str, *, path: str = "", line: int | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.hint = hint

    def __str__(self) -> str:
        where = f" (line {self.line})" if self.line is not None else ""
        return f"{self.path + ': ' if self.path else ''}{self.message}{where}"


def read_text(path: Path, what: str = "file") -> str:
    """The text of a user file: at most :data:`~nnix.limits.MAX_FILE_BYTES`, UTF-8 (a BOM is dropped)."""
    try:
        if path.is_dir():
            raise DocumentError(f"{path} is a directory, not a {what}", hint="give the path of the file itself")
        with open(path, "rb") as f:
            data = f.read(limits.MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise DocumentError(f"{what} {path} does not exist") from None
    except PermissionError:
        raise DocumentError(f"cannot read {path}: permission denied", hint="check the file's permissions") from None
    except OSError as e:
        raise DocumentError(f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > limits.MAX_FILE_BYTES:
        raise DocumentError(
            f"{path} is larger than {limits.MAX_FILE_BYTES // (1024 * 1024)} MiB",
            hint="a config or search space this large is not supported; is it the right file?",
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DocumentError(
            f"{path} is not UTF-8 text (byte {e.start})", line=line, hint="save it as UTF-8; is it the right file?"
        ) from None


# --------------------------------------------------------------------------------------------------
# YAML

_Collection = TypeVar("_Collection", SequenceNode, MappingNode)


def _line(mark: Any) -> int | None:
    return int(mark.line) + 1 if mark is not None else None


class _GuardedComposer:
    """PyYAML's composer (events to nodes) again, with bounds (see the module docstring) and the key path
    of the node being composed, for messages. Mixed into a loader before the parser and the resolver."""

    if TYPE_CHECKING:  # provided by the parser and the resolver of the loader

        def check_event(self, *choices: type[Event]) -> bool: ...
        def peek_event(self) -> Any: ...
        def get_event(self) -> Any: ...
        def resolve(self, kind: type[Node], value: Any, implicit: Any) -> str: ...
        def descend_resolver(self, current_node: Node | None, current_index: Any) -> None: ...
        def ascend_resolver(self) -> None: ...

    def __init__(self) -> None:
        self.anchors: dict[str, Node] = {}
        self._depth = 0
        self._values = 0
        self._sizes: dict[int, int] = {}  # id(anchored node) -> values it stands for (done composing)
        self._path: list[str | int] = []

    def _where(self) -> str:
        return dotted(tuple(self._path))

    def _count(self, n: int, mark: Any) -> None:
        self._values += n
        if self._values > limits.MAX_VALUES:
            raise DocumentError(
                f"the document holds more than {limits.MAX_VALUES:,} values (aliases counted as expanded)",
                path=self._where(),
                line=_line(mark),
                hint="is this an alias bomb? write the values out, or split the search space",
            )

    def get_single_node(self) -> Node | None:
        self.get_event()  # StreamStart
        node = None
        if not self.check_event(StreamEndEvent):
            self.get_event()  # DocumentStart
            node = self.compose_node(None, None)
            self.get_event()  # DocumentEnd
        if not self.check_event(StreamEndEvent):
            event = self.get_event()
            raise DocumentError("a second YAML document (after ---) in the file", line=_line(event.start_mark),
                                hint="a config is one document: remove the second one")
        self.get_event()  # StreamEnd
        return node

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if self.check_event(AliasEvent):
            event = self.get_event()
            anchor = event.anchor
            if anchor not in self.anchors:
                raise DocumentError(f"alias *{anchor} names no anchor before it", path=self._where(),
                                    line=_line(event.start_mark), hint=f"define &{anchor} before using *{anchor}")
            target = self.anchors[anchor]
            size = self._sizes.get(id(target))
            if size is None:
                raise DocumentError(f"alias *{anchor} is used inside its own anchor (a structure without end)",
                                    path=self._where(), line=_line(event.start_mark))
            self._count(size, event.start_mark)
            return target
        event = self.peek_event()
        anchor = event.anchor
        if anchor is not None and anchor in self.anchors:
            first = _line(self.anchors[anchor].start_mark)
            raise DocumentError(f"anchor &{anchor} is defined twice (first at line {first})",
                                path=self._where(), line=_line(event.start_mark))
        self._depth += 1
        if self._depth > limits.MAX_DEPTH:
            raise DocumentError(f"nested deeper than {limits.MAX_DEPTH} levels", path=self._where(),
                                line=_line(event.start_mark), hint="is this the right file?")
        before = self._values
        self._count(1, event.start_mark)
        self.descend_resolver(parent, index)
        if self.check_event(ScalarEvent):
            event = self.get_event()
            tag = event.tag
            if tag is None or tag == "!":
                tag = self.resolve(ScalarNode, event.value, event.implicit)
            node: Node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
            if anchor is not None:
                self.anchors[anchor] = node
        elif self.check_event(MappingStartEvent):
            node = self._compose_mapping(anchor)
        else:
            node = self._compose_sequence(anchor)
        self.ascend_resolver()
        self._depth -= 1
        if anchor is not None:
            self._sizes[id(node)] = self._values - before
        return node

    def _open(self, kind: type[_Collection], anchor: str | None) -> _Collection:
        """The node a sequence or mapping start event opens (its tag resolved, its anchor recorded)."""
        start = self.get_event()
        tag = start.tag
        if tag is None or tag == "!":
            tag = self.resolve(kind, None, start.implicit)
        node = kind(tag, [], start.start_mark, None, flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        return node

    def _compose_sequence(self, anchor: str | None) -> SequenceNode:
        node = self._open(SequenceNode, anchor)
        index = 0
        while not self.check_event(SequenceEndEvent):
            self._path.append(index)
            node.value.append(self.compose_node(node, index))
            self._path.pop()
            index += 1
        node.end_mark = self.get_event().end_mark
        return node

    def _compose_mapping(self, anchor: str | None) -> MappingNode:
        node = self._open(MappingNode, anchor)
        seen: dict[tuple[str, str], int | None] = {}
        while not self.check_event(MappingEndEvent):
            key = self.compose_node(node, None)
            name = brief(key.value, 40).strip("'") if isinstance(key, ScalarNode) else "?"
            self._path.append(name)
            if isinstance(key, ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                ident = (key.tag, key.value)
                if ident in seen:
                    raise DocumentError(
                        f"duplicate key (first at line {seen[ident]})",
                        path=self._where(),
                        line=_line(key.start_mark),
                        hint="each key may appear once in a mapping: keep the one you mean",
                    )
                seen[ident] = _line(key.start_mark)
            value = self.compose_node(node, key)
            self._path.pop()
            node.value.append((key, value))
        node.end_mark = self.get_event().end_mark
        return node


class _Constructor(SafeConstructor):
    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (DocumentError, yaml.YAMLError):
            raise
        except Exception as e:  # PyYAML's converters raise ValueError, KeyError...: 2001-13-45, !!bool maybe
            what = brief(node.value) if isinstance(node, ScalarNode) else "this value"
            tag = str(node.tag).rpartition(":")[2][:40]
            why = "" if isinstance(e, KeyError) else f": {str(e)[:100]}"
            raise DocumentError(f"cannot read {what} as a {tag}{why}", line=_line(node.start_mark),
                                hint="quote it if it is meant as text") from None

    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = str(node.value)
        if len(text) > limits.MAX_INT_DIGITS and sum(c.isdigit() for c in text) > limits.MAX_INT_DIGITS:
            raise DocumentError(f"an integer of more than {limits.MAX_INT_DIGITS} digits", line=_line(node.start_mark),
                                hint="quote it if it is meant as text")
        return int(super().construct_yaml_int(node))


_Constructor.add_constructor("tag:yaml.org,2002:int", _Constructor.construct_yaml_int)  # type: ignore[type-var]

_CParser: Any
try:
    from yaml.cyaml import CParser as _CParser  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - PyYAML without libyaml
    _CParser = None

if _CParser is not None:

    class _Loader(_GuardedComposer, _CParser, _Constructor, Resolver):  # type: ignore[misc]
        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            _GuardedComposer.__init__(self)
            _Constructor.__init__(self)
            Resolver.__init__(self)

else:  # pragma: no cover - PyYAML without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Loader(_GuardedComposer, Reader, Scanner, Parser, _Constructor, Resolver):  # type: ignore[no-redef,misc]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            _GuardedComposer.__init__(self)
            _Constructor.__init__(self)
            Resolver.__init__(self)


def load_yaml(text: str) -> Any:
    """One YAML document (None when empty). Raises :class:`DocumentError` for a syntax error (with the
    line) or a document out of bounds (with the key path and line)."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        return loader.construct_document(node)
    except DocumentError:
        raise
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or str(e)
        if "nesting depth" in problem:  # libyaml's own bound (1000 flow levels) met before ours
            raise DocumentError(f"nested deeper than {limits.MAX_DEPTH} levels", line=_line(mark),
                                hint="is this the right file?") from None
        detail = f"{problem} ({e.context})" if e.context else str(problem)
        detail = detail if len(detail) <= 300 else detail[:297] + "..."
        hint = "check indentation, and that each ':' is followed by a space"
        if isinstance(e, ConstructorError):
            hint = "nnix reads plain YAML: no Python tags (!!python/...) or other custom tags"
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise DocumentError(f"YAML syntax error{where}: {detail}", hint=hint) from None
    except yaml.YAMLError as e:  # ReaderError: a character YAML does not allow
        raise DocumentError(f"not readable as YAML: {brief(str(e), 200)}", hint="is it a text file?") from None
    except RecursionError:  # pragma: no cover - the depth bound comes first
        raise DocumentError(f"nested deeper than {limits.MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


# --------------------------------------------------------------------------------------------------
# JSON


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def load_json(text: str) -> Any:
    """A JSON document within bounds; raises :class:`DocumentError` (``ValueError`` for text that is not
    JSON at all, so that a caller may try YAML next)."""
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as e:
        raise DocumentError(f"duplicate key {brief(e.args[0])}", hint="each key may appear once in an object") from None
    except RecursionError:
        raise DocumentError(f"nested deeper than {limits.MAX_DEPTH} levels", hint="is this the right file?") from None
    problem = limits.shape_problem(value)
    if problem is not None:
        raise DocumentError(problem[1], path=problem[0], hint="is this the right file?")
    return value
