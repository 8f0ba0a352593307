"""Pulumi components of ascend-fleet: one per file, each fed its slice of the plan; `build` makes them all."""

from components.ascend_host import AscendHost
from components.fleet import Fleet, build
from components.group_member import GroupMember
from components.model_service import ModelService
from components.router import Rollout, Router
from components.stack_config import fleet_deployment, ssh_private_key

__all__ = ["AscendHost", "Fleet", "GroupMember", "ModelService", "Rollout", "Router", "build", "fleet_deployment", "ssh_private_key"]
