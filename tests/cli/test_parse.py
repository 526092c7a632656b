"""nnix.cli.parse: argv read against the declarations as click read it (NNI's spellings, `-p8080`, `-af`,
`--opt=value`, `--`, the last of a repeated option), usage errors with the usage line, "did you mean" and exit code 2,
help pages in the layout the typer-built CLI printed, wrapped as textwrap wraps."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nnix.cli import parse as p
from nnix.cli.spec import ROOT, Arg, Group, Opt, Verb, walk
from nnix.limits import MAX_TRIAL_CONCURRENCY

NODES = list(walk(ROOT))


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``parse(argv)`` for a mistake or help: its exit code, stdout and stderr."""
    with pytest.raises(SystemExit) as info:
        p.parse(argv, "nnix")
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


@pytest.mark.parametrize(("argv", "target", "expected"), [
    (["trial", "ls"], "quick:trial_ls", {"experiment_id": None, "head": None, "tail": None, "as_json": False}),
    (["trial", "ls", "ID", "--tail", "10"], "quick:trial_ls", {"experiment_id": "ID", "tail": 10}),
    (["trial", "ls", "--head=0", "--json", "ID"], "quick:trial_ls",
     {"head": 0, "as_json": True, "experiment_id": "ID"}),
    (["trial", "ls", "--tail", "1", "--tail", "2"], "quick:trial_ls", {"tail": 2}),  # the last one wins
    (["trial", "ls", "--", "--json"], "quick:trial_ls", {"experiment_id": "--json", "as_json": False}),
    (["stop"], "quick:stop", {"experiment_id": None, "all_": False, "port": None}),
    (["stop", "ID", "-a"], "quick:stop", {"experiment_id": "ID", "all_": True}),
    (["stop", "-p8080"], "quick:stop", {"port": 8080}),
    (["stop", "-ap", "1"], "quick:stop", {"all_": True, "port": 1}),
    (["create", "-c", "x.yml"], "quick:create", {"config": Path("x.yml"), "port": 8080, "host": "127.0.0.1",
                                                 "debug": False, "foreground": False, "url_prefix": None,
                                                 "experiment_id": None}),
    (["create", "--config=x.yml", "--port", "0", "-df", "--id", "abc", "--host", "::1", "--url_prefix", "u"],
     "quick:create", {"port": 0, "debug": True, "foreground": True, "experiment_id": "abc", "host": "::1",
                      "url_prefix": "u"}),
    (["create", "-c", "-x.yml"], "quick:create", {"config": Path("-x.yml")}),  # a value may start with a dash
    (["resume", "ID", "-f", "--port", "0", "--experiment_dir", "/d"], "quick:resume",
     {"experiment_id": "ID", "foreground": True, "port": 0, "experiment_dir": Path("/d")}),
    (["view", "ID", "-e", "/tmp"], "quick:view", {"experiment_id": "ID", "experiment_dir": Path("/tmp")}),
    (["algo", "reg", "-m", "m.yml"], "commands:algo_register", {"meta_path": Path("m.yml")}),  # NNI's alias
    (["algo", "unreg", "X"], "commands:algo_unregister", {"name": "X"}),
    (["trial", "kill", "ID", "--trial_id", "T"], "commands:trial_kill", {"experiment_id": "ID", "trial_id": "T"}),
    (["log", "trial", "--trial-id", "T", "-n", "5", "-f"], "commands:log_trial", {"trial_id": "T", "tail": 5,
                                                                                   "follow": True, "stdout": False}),
    (["update", "trialnum", "ID", "--value", "+5"], "commands:update_trialnum", {"value": 5}),
    (["experiment", "save", "ID", "--saveCodeDir"], "commands:experiment_save", {"save_code": True, "path": Path(".")}),
    (["experiment", "load", "--codeDir", "c", "--path", "a.zip", "--logDir", "l", "--searchSpacePath", "s"],
     "commands:experiment_load", {"code_dir": Path("c"), "path": Path("a.zip"), "log_dir": Path("l"),
                                  "search_space_path": Path("s"), "force": False}),
    (["experiment", "delete", "--all", "-y"], "commands:experiment_delete", {"all_": True, "yes": True}),
    (["top", "-t", "0.5"], "commands:top", {"interval": 0.5}),
])
def test_spellings_are_read_as_click_read_them(argv: list[str], target: str, expected: dict[str, Any]) -> None:
    verb, kwargs = p.parse(argv, "nnix")
    assert verb.run == f"nnix.cli.{target}"
    assert {k: kwargs[k] for k in expected} == expected
    assert set(kwargs) == {param.dest for param in verb.params}


@pytest.mark.parametrize(("argv", "usage", "error"), [
    (["sotp"], "nnix [OPTIONS] COMMAND [ARGS]...", "No such command 'sotp'. Did you mean 'stop'?"),
    (["TRIAL", "ls"], "nnix [OPTIONS] COMMAND [ARGS]...", "No such command 'TRIAL'. Did you mean 'trial'?"),
    (["trial", "lss"], "nnix trial [OPTIONS] COMMAND [ARGS]...", "No such command 'lss'. Did you mean 'ls'?"),
    (["--bogus"], "nnix [OPTIONS] COMMAND [ARGS]...", "No such option: --bogus"),
    (["trial", "--json", "ls"], "nnix trial [OPTIONS] COMMAND [ARGS]...", "No such option: --json"),
    (["trial", "ls", "--jsn"], "nnix trial ls [OPTIONS] [experiment_id]",
     "No such option: --jsn. Did you mean --json?"),
    (["stop", "-ax"], "nnix stop [OPTIONS] [experiment_id]", "No such option: -x"),
    (["trial", "ls", "--tail"], "nnix trial ls [OPTIONS] [experiment_id]", "Option '--tail' requires an argument."),
    (["stop", "-p"], "nnix stop [OPTIONS] [experiment_id]", "Option '-p' requires an argument."),
    (["trial", "ls", "--json=1"], "nnix trial ls [OPTIONS] [experiment_id]", "Option '--json' does not take a value."),
    (["trial", "ls", "--tail", "x"], "nnix trial ls [OPTIONS] [experiment_id]",
     "Invalid value for '--tail': 'x' is not a valid integer."),
    (["trial", "ls", "--tail", "-1"], "nnix trial ls [OPTIONS] [experiment_id]",
     "Invalid value for '--tail': -1 is not in the range x>=0."),
    (["trial", "ls", "a", "b", "c"], "nnix trial ls [OPTIONS] [experiment_id]",
     "Got unexpected extra arguments (b c)"),
    (["create"], "nnix create [OPTIONS]", "Missing option '--config' / '-c'."),
    (["resume"], "nnix resume [OPTIONS] {experiment_id}", "Missing argument 'experiment_id'."),
    (["update", "concurrency", "-v", "0"], "nnix update concurrency [OPTIONS] [experiment_id]",
     f"Invalid value for '--value' / '-v': 0 is not in the range 1<=x<={MAX_TRIAL_CONCURRENCY}."),
    (["update", "concurrency", "-v", "1e3"], "nnix update concurrency [OPTIONS] [experiment_id]",
     "Invalid value for '--value' / '-v': '1e3' is not a valid integer."),
    (["top", "-t", "inf"], "nnix top [OPTIONS]", "Invalid value for '--time' / '-t': inf is not in the range "
                                                 "0.1<=x<=3600."),
    (["top", "-t", "nan"], "nnix top [OPTIONS]", "Invalid value for '--time' / '-t': 'nan' is not a valid float."),
])
def test_mistakes_say_what_and_where_with_exit_code_2(argv: list[str], usage: str, error: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(argv, capsys)
    path = usage.split(" [", 1)[0]
    assert (code, out) == (2, "")
    assert err == f"Usage: {usage}\nTry '{path} --help' for help.\n\nError: {error}\n"


def test_an_unreadable_path_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yml"
    config.write_text("{}")
    config.chmod(0)
    if os.access(config, os.R_OK):
        pytest.skip("root reads any file")
    code, _, err = run(["create", "--config", str(config)], capsys)
    assert code == 2 and f"Invalid value for '--config' / '-c': Path '{config}' is not readable." in err


def test_help_version_and_a_group_alone(capsys: pytest.CaptureFixture[str]) -> None:
    root = p.render_help(ROOT, "nnix")
    assert run(["--help"], capsys) == (0, root, "")
    assert run(["--help", "trial"], capsys) == (0, root, "")
    assert run([], capsys) == (2, "", root)  # nothing asked: the help, as a mistake
    group = ROOT.find("trial")
    assert isinstance(group, Group)
    trial = p.render_help(group, "nnix trial")
    assert run(["trial"], capsys) == (2, "", trial)
    assert run(["trial", "--help", "ls"], capsys) == (0, trial, "")
    verb = group.find("ls")
    assert verb is not None
    ls = p.render_help(verb, "nnix trial ls")
    assert run(["trial", "ls", "--tail", "x", "--help"], capsys) == (0, ls, "")  # help comes before values are read
    assert run(["trial", "ls", "--bogus", "--help"], capsys)[0] == 2  # a mistake in the words comes first
    from nnix.version import __version__

    assert run(["--version", "trial"], capsys) == (0, f"{__version__}\n", "")
    assert run(["-v"], capsys)[:2] == (0, f"{__version__}\n")


STOP_HELP = """\
Usage: nnix stop [OPTIONS] [experiment_id]

  Stop an experiment's manager, whatever its status: a running experiment's
  trials are canceled and its state is kept for resume; a finished (DONE,
  ERROR) or viewed one stops serving its web UI.

Arguments:
  experiment_id <str>  Experiment id (or unique prefix); default: the one
                       running.

Options:
  -a, --all               Stop every live experiment manager.
  -p, --port <int range>  Stop the experiment on this port.  [0<=x<=65535]
  --help                  Show this message and exit.
"""


def test_a_help_page_keeps_the_layout_users_know() -> None:
    assert p.render_help(ROOT.find("stop"), "nnix stop", width=78) == STOP_HELP  # type: ignore[arg-type]


@pytest.mark.parametrize("columns", [60, 80, 200])
def test_every_help_page_fits_and_names_everything_declared(columns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each page fits the terminal (up to 78 columns); a group lists each of its visible verbs with its whole first
    sentence (never cut with "..."); a verb's page has its help, each visible option's spellings and help."""
    monkeypatch.setenv("COLUMNS", str(columns))
    width = min(columns, 80) - 2

    def flat(text: str) -> str:
        return "".join(text.split())

    for path, node in NODES:
        page = p.render_help(node, " ".join(("nnix", *path)))
        assert max(len(line) for line in page.splitlines()) <= width, page
        assert flat(node.help) in flat(page)
        for param in node.params:
            shown = param.names if isinstance(param, Opt) else (param.name,)
            assert all((f" {n}" in page) != (isinstance(param, Opt) and param.hidden) for n in shown), (path, param)
            assert flat(param.help) in flat(page) if param.help else True
        if isinstance(node, Group):
            listed = "\n" + page.split("Commands:\n", 1)[1]
            for verb in node.verbs:
                assert (f"\n  {verb.name} " in listed) != verb.hidden, (path, verb)
                assert verb.hidden or flat(p.short_help(verb.help)) in flat(listed)
            assert not any(line.endswith("...") for line in listed.splitlines())


def test_short_help_is_the_first_sentence() -> None:
    assert p.short_help("List trials, with why each failed. Piped, nothing is cut.") == (
        "List trials, with why each failed.")
    assert p.short_help("One (e.g. two) three\n\nSecond paragraph.") == "One (e.g."  # as click cut it
    assert p.short_help("No full stop") == "No full stop"


TRICKY = ["built-ins cannot be removed (run-local, nnictl-compatible, --url-prefix, a-b-c-d)",
          "em--dash and word--word, then ---x and x--- and -- alone, NNI_OUTPUT_DIR/tensorboard.",
          "  leading spaces, trailing ones   ", "tabs\tand\nnewlines kept  as  written"]


def test_wrapping_is_textwrap() -> None:
    """The help's line breaks are textwrap's (as click's), without importing it: every declared help text and some
    tricky ones, at every width where no word is longer than a line."""
    texts = [n.help for _, n in NODES] + [q.help for _, n in NODES for q in n.params if q.help] + TRICKY
    for text in texts:
        longest = max(len(c) for c in textwrap.TextWrapper()._split(text))
        for width in range(longest + 4, 81):
            for indent in ("", "  "):
                expected = textwrap.wrap(text, width, initial_indent=indent + "  ", subsequent_indent=indent,
                                         replace_whitespace=False)
                assert p.wrap(text, width, indent + "  ", indent) == expected, (text, width)


def test_a_word_longer_than_the_line_is_cut() -> None:
    assert p.wrap("abcdefghij klm", 4) == ["abcd", "efgh", "ij", "klm"]


def test_usage_wraps_under_its_prefix() -> None:
    verb = Verb("go", "", "m:f", *(Arg(f"argument_number_{i}", required=True) for i in range(6)))
    lines = p.render_help(verb, "nnix go", width=50).splitlines()
    assert lines[:2] == ["Usage: nnix go [OPTIONS] {argument_number_0}", " " * 15 + "{argument_number_1}"]
    lines = p.render_help(verb, "python -m nnix.cli.main go", width=50).splitlines()  # too long a prefix: below it
    assert [line.rstrip() for line in lines[:2]] == ["Usage: python -m nnix.cli.main go",
                                                     " " * 11 + "[OPTIONS] {argument_number_0}"]
