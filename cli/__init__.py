"""The command line and the files it touches: stack files, `pin`, `plan --against` revisions.

`python -m allocation <command>` forwards here. Unlike `allocation/`, this
package reads and writes files and runs git and a second Python; it hands the
pure planner plain values and dispatches to `ops/` for what reaches hosts.
"""
