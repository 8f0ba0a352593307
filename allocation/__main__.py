"""`python -m allocation <command>`: the documented entry point, kept; the command line lives in `cli`.

The cyclic garbage collector runs once per million allocations here, not every 700: a command is one
short process whose records and documents are trees that reference counting frees, yet each
collection walks every object still alive. At 1,300 hosts that was a quarter of `plan`'s CPU time
(0.4 s), for about a thousand objects found (mypy raises its threshold for the same reason:
python/mypy mypy/gctune.py)."""

import gc
import sys

gc.set_threshold(1_000_000, 100, 100)

from cli.main import main  # noqa: E402 - after the collector is set: the imports allocate too

sys.exit(main())
