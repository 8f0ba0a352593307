"""`python -m allocation <command>`: the documented entry point, kept; the command line lives in `cli`."""

import sys

from cli.main import main

sys.exit(main())
