"""`nnix` (alias `nnictl`): NNI's verbs and flags. Every verb is declared once, in :mod:`nnix.cli.spec`;
:mod:`nnix.cli.parse` reads the command line against it (help and usage errors included), and only then is the
module of the verb imported (:mod:`nnix.cli.quick` for the verbs that must start fast, :mod:`nnix.cli.commands` for
the others). Only this module prints an NnixError and chooses the exit code."""

from __future__ import annotations

import os
import sys


def main() -> None:
    argv = sys.argv[1:]
    if os.path.basename(sys.argv[0]) == "nnictl" and "--version" not in argv and "-v" not in argv:
        from nnix.cli.quick import note_real_nni

        note_real_nni()  # this `nnictl` is nnix's: say so where NNI's could be expected
    if argv[:1] == ["create"] or argv[:2] == ["trial", "ls"]:
        from nnix.host.collector import hold

        hold()  # over the imports: `create` resumes it once its first trial runs; `trial ls` ends first
    from nnix.cli.parse import parse, prog_name

    try:
        try:
            verb, kwargs = parse(argv, prog_name())  # (help and usage errors end here, before nnix.errors' import)
            _run(verb.run, kwargs)
        finally:
            sys.stdout.flush()
    except BrokenPipeError:  # a pipe closed early (`| head`): exit 1 without a traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


def _run(target: str, kwargs: dict[str, object]) -> None:
    """Call ``"module:function"`` with the verb's arguments; an NnixError is printed with its hint, and its exit
    code chosen."""
    from nnix.errors import NnixError

    module, _, name = target.partition(":")
    try:
        getattr(__import__(module, fromlist=[name]), name)(**kwargs)
    except NnixError as e:
        from nnix.cli.out import secho

        secho(f"error: {e.message}", err=True, fg="red")
        if e.hint:
            secho(f"  hint: {e.hint}", err=True)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
