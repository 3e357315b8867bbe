"""Action plugin bcd_rollout_info: runs the module once, printing its control-plane retries as they happen
(a retried call says the attempt, the next attempt's time and bcd_control_plane_timeout)."""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.plugin_utils.bcd_progress import RetryReportingAction


class ActionModule(RetryReportingAction):
    MODULE = "bcd.kubernetes.bcd_rollout_info"
