"""Filters for bcd-ansible's reports."""

from __future__ import annotations


def bcd_report_row(node: dict, width: int = 20, id_width: int = 31) -> str:
    """One line of the per-node report: Node, bcd node id, state, trust, and why it does not report
    (or why a node that reports will not for long: its current pod's join was refused).

    ``node``: an item of the bcd_nodes module's ``nodes`` result; ``width`` and ``id_width``: the
    widths (characters) of the Node and bcd node columns, the longest of each in the report.
    """
    line = (f"{node.get('name')!s:<{width}}  {node.get('id') or '-':<{id_width}}  {node.get('state') or '-':<9}  "
            f"{node.get('trust') or '-'}")
    if node.get("why"):
        line += f"   <- {node['why']}"
    return line


class FilterModule:
    def filters(self):
        return {"bcd_report_row": bcd_report_row}
