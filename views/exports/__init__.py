"""Pure exports of the deployment records: what they become in another tool's format."""
