"""Pulumi components of ascend-fleet: one per file, each fed its slice of the plan."""

from components.ascend_host import AscendHost
from components.model_service import ModelService
from components.router import Rollout, Router
from components.stack_config import fleet_deployment, ssh_private_key

__all__ = ["AscendHost", "ModelService", "Rollout", "Router", "fleet_deployment", "ssh_private_key"]
