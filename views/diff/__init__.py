"""What a change of configuration does to the allocation: the plan diff.

`plan --against REF` shows a pull request's reviewer which services a merge would add, remove,
move to other cards, give other ports, or restart with a new container spec, before anyone runs
`pulumi up`: first of all which containers `pulumi up` will re-create (each one a model reload),
classified as the docker provider classifies their inputs (`records.restarts`). `diff_plans`
compares two plan JSON documents (the output of `plan --format json`; `views.diff.compare`, with
the container's part in `views.diff.container`), `render_diff` writes the result as a table, JSON
or markdown (`views.diff.render`). Pure: no I/O, no git, no Pulumi; `cli.revision` fetches the old
plan.
"""

from views.diff.compare import PlanDiff, diff_plans
from views.diff.render import FORMATS, render_diff

__all__ = ["FORMATS", "PlanDiff", "diff_plans", "render_diff"]
