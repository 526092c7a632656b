"""nnix.cli.spec: every verb declared once. Names and aliases are unique in their group, spellings and keywords in
their verb; each verb's function takes exactly the keywords declared; and no other module of the CLI holds a table
of flag spellings or a parser of its own (the quick verbs and the others are read from the same declarations)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import nnix.cli
from nnix.cli.spec import ROOT, Arg, Group, Opt, Verb, walk

CLI = Path(nnix.cli.__file__).resolve().parent
NODES = list(walk(ROOT))
VERBS = [(path, node) for path, node in NODES if isinstance(node, Verb)]
# the long spellings (a short one alone, `-c`, is also bash's)
SPELLINGS = {n for _, node in NODES for p in node.params if isinstance(p, Opt) for n in p.names if n.startswith("--")}


def test_the_table_holds_every_verb_of_nnictl() -> None:
    paths = {" ".join(path) for path, _ in VERBS}
    assert {"create", "resume", "view", "stop", "top", "trial ls", "trial kill", "update concurrency",
            "experiment list", "experiment export", "experiment save", "experiment load", "log trial", "algo register",
            "webui url", "config show", "platform clean", "tensorboard start"} <= paths
    assert len(paths) == len(VERBS) > 30


def test_names_aliases_spellings_and_keywords_are_unique() -> None:
    for path, node in NODES:
        if isinstance(node, Group):
            names = [n for v in node.verbs for n in (v.name, *v.aliases)]
            assert len(names) == len(set(names)), f"{path}: a name twice: {names}"
        spellings = [n for p in node.params if isinstance(p, Opt) for n in p.names]
        assert len(spellings) == len(set(spellings)) and "--help" not in spellings, (path, spellings)
        for name in spellings:
            assert (name.startswith("--") and len(name) > 3) or (len(name) == 2 and name[0] == "-"), (path, name)
        dests = [p.dest for p in node.params]
        assert len(dests) == len(set(dests)), (path, dests)
        for arg in (p for p in node.params if isinstance(p, Arg)):  # a required positional never follows an optional
            before = node.params[: node.params.index(arg)]
            assert not arg.required or all(a.required for a in before if isinstance(a, Arg)), (path, arg)


def test_each_verb_runs_a_function_taking_exactly_its_declared_keywords() -> None:
    for path, verb in VERBS:
        module, _, name = verb.run.partition(":")
        function = getattr(__import__(module, fromlist=[name]), name)
        params = inspect.signature(function).parameters
        assert list(params) == [p.dest for p in verb.params], f"nnix {' '.join(path)}: {verb.run}"
        assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params.values()), verb.run


def _literal_spellings(tree: ast.AST) -> list[str]:
    """Flag spellings held in a dict, list, tuple or set written in the source (a parser's table)."""
    found = []
    for node in ast.walk(tree):
        items: list[ast.expr | None] = []
        if isinstance(node, ast.Dict):
            items = [*node.keys, *node.values]
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = list(node.elts)
        found += [i.value for i in items if isinstance(i, ast.Constant) and i.value in SPELLINGS]
    return found


def test_no_other_module_of_the_cli_declares_flags_or_parses_argv() -> None:
    """A second parser (a hand-written fast path, typer's decorators, argparse) would be a twin of the table."""
    modules = sorted(p for p in CLI.glob("*.py") if p.name != "spec.py")
    assert {"main.py", "parse.py", "quick.py", "commands.py"} <= {p.name for p in modules}
    for path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert not _literal_spellings(tree), f"{path.name} holds flag spellings: {_literal_spellings(tree)}"
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not imported & {"typer", "click", "argparse", "optparse", "getopt"}, (path.name, imported)


def test_the_check_sees_a_table_of_spellings() -> None:
    # the check above must be able to fail: what the hand-written fast path of main.py held
    assert _literal_spellings(ast.parse('_parse(args, {"--json": "json"}, {"--head": "head", "--tail": "tail"})')) == [
        "--json", "--head", "--tail"]
