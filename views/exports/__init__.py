"""Every file a plan is exported as: compose files and the docker-run script (`render`), the
Prometheus targets, config and rules (`prometheus`), the Grafana dashboard (`dashboard`) and the
metric names these query (`metric_names`), and the Kubernetes objects
(`kubernetes`) with their YAML stream (`kubernetes_yaml`).

Views, like the report: they read the deployment records (`records.deployment`) and return text,
so an export cannot drift from what the Pulumi program deploys. Pure: no file, process, socket or
Pulumi (tests/test_structure.py); the CLI writes what they return (`cli.safe_write`). A new output
target is a module here; code that reaches a host goes in `ops/`.
"""
