"""Views of a plan, pure: the report, the plan diff and their markdown, and the files a plan is exported as (`exports/`)."""
