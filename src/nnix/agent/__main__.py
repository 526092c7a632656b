"""``python -m nnix.agent``: the agent that services start in their environments (see
:mod:`nnix.agent.client`)."""

from __future__ import annotations

import sys

from nnix.agent.client import main

if __name__ == "__main__":
    sys.exit(main())
