"""Partitioning: declarative specs (a superset of mig-parted v1), placement planning, diffs.

spec = load_spec("playbooks/layouts.yaml")
plan = plan_host(spec, "inference", host.name, host.groups, facts)
plan.errors                 # impossible requests, naming file:line, GPU and valid choices
plan.agent_args(force=False)  # hw.ops.PartitionRequestArgs for the agent's partition verb
assert_host(spec, "inference", host.name, host.groups, facts)  # [] when the label holds
"""

from gpupoolctl.hw.mig_names import parse_profile_name
from gpupoolctl.partition import planner
from gpupoolctl.partition.check import assert_host, selected_gpus
from gpupoolctl.partition.diff import GpuDiff, HostPlan, plan_host, reset_plan
from gpupoolctl.partition.export import export_config
from gpupoolctl.partition.layout import PlanError
from gpupoolctl.partition.profiles import profile_rows
from gpupoolctl.partition.spec import MigDevice, Spec, SpecEntry, load_spec, parse_spec

__all__ = [
    "GpuDiff",
    "HostPlan",
    "MigDevice",
    "PlanError",
    "Spec",
    "SpecEntry",
    "assert_host",
    "export_config",
    "load_spec",
    "parse_profile_name",
    "parse_spec",
    "plan_host",
    "planner",
    "profile_rows",
    "reset_plan",
    "selected_gpus",
]
