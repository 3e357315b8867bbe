"""Action plugin bcd_gpu_isolation: runs the module once, in the worker process where that is safe
(plugin_utils/bcd_inprocess.py). ``config`` comes from the inventory when the task gives none, but
for ``scope=node`` (node-side: the inventory never reaches a node)."""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.plugin_utils.bcd_inprocess import BcdAction


class ActionModule(BcdAction):
    MODULE = "bcd.kubernetes.bcd_gpu_isolation"

    def _wants_inventory(self, args) -> bool:
        return args.get("scope", "cluster") != "node"
