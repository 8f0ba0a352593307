"""Views of a plan: the report, the plan diff and their markdown (pure)."""
