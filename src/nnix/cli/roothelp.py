"""`nnix --help` as typer prints it on a screen 80 columns wide or wider (and on a pipe): printed from here, that
verb needs no typer (most of its start-up). A test checks that it is what typer prints; after a change of a
top-level verb's help, rewrite it with ``python -m nnix.cli.roothelp``."""

from __future__ import annotations

TEXT = """\
Usage: {prog} [OPTIONS] COMMAND [ARGS]...

  Run NNI hyper-parameter tuning experiments (nnictl-compatible).

Options:
  -v, --version  Print the version.
  --help         Show this message and exit.

Commands:
  create       Create an experiment from a config file and start it (in the
               background unless --foreground).
  resume       Resume a stopped (or crashed) experiment: ids, sequence numbers
               and tuner history continue.
  view         Serve a stopped experiment read-only.
  stop         Stop an experiment's manager, whatever its status: a running
               experiment's trials are canceled and its state is kept for
               resume; a finished (DONE, ERROR) or viewed one stops serving
               its web UI.
  top          Watch running experiments and their trials (Ctrl-C to quit).
  update       Change a running experiment.
  trial        List or kill trials.
  experiment   List, show, export, import and delete experiments.
  log          Show the manager's log and trials' output.
  algo         Tuners and assessors installed (built-in and by entry point).
  webui        The web UI of an experiment.
  config       An experiment's config.
  platform     What nnix left on remote machines and cluster storage.
  tensorboard  TensorBoard for trials (needs TensorBoard: the tensorboard
               extra of nnix).
"""


def render() -> str:
    """The root help as typer prints it now, with ``{prog}`` for the program's name."""
    from typer.testing import CliRunner

    from nnix.cli.commands import app

    out = CliRunner().invoke(app, ["--help"], prog_name="PROG", terminal_width=78).output
    return out.replace("{", "{{").replace("}", "}}").replace("Usage: PROG ", "Usage: {prog} ", 1)


if __name__ == "__main__":
    from pathlib import Path

    path = Path(__file__)
    text = path.read_text()
    start = text.index('TEXT = """\\\n') + len('TEXT = """\\\n')
    end = text.index('"""\n', start)
    path.write_text(text[:start] + render().replace("\\", "\\\\") + text[end:])
