"""The version of ascend-fleet, in one place: `python -m allocation --version` prints it, and the first
entry of CHANGELOG.md names it, with what upgrading to it re-creates (tests/test_changelog.py).

It reaches no container: a label or an environment variable holding it would change every
container's inputs, and so re-create every container, on every upgrade.
"""

VERSION = "0.2.0"
