"""Action plugin bcd_image_guard: runs the module once, in the worker process where that is safe
(plugin_utils/bcd_inprocess.py); ``config`` comes from the inventory when the task gives none."""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.plugin_utils.bcd_inprocess import BcdAction


class ActionModule(BcdAction):
    MODULE = "bcd.kubernetes.bcd_image_guard"
