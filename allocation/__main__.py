import sys

from allocation.cli import main

sys.exit(main())
