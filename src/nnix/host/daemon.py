"""Entry point of a detached manager: ``python -m nnix.host.daemon ID ACTION PORT [HOST]``."""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from nnix.errors import NnixError
from nnix.host.run import run_manager


def main(argv: list[str]) -> int:
    exp_id, action, port = argv[0], argv[1], int(argv[2])
    host = argv[3] if len(argv) > 3 else "127.0.0.1"
    try:
        run_manager(exp_id, action, port=port, live=False, exit_when_done=False, host=host)
    except NnixError as e:
        with contextlib.suppress(OSError):
            print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # Everything is recorded and closed: skip the interpreter's slow teardown so `nnix stop` returns fast.
    with contextlib.suppress(BaseException):  # e.g. a full disk under the log files
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)
