"""The filter that names the nodes reporting with a bcd pod that is not healthy (the per-node
report and the adoption's look at what is left to do)."""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.filter.bcd import FilterModule, bcd_reporting_unhealthy


def test_keeps_the_unhealthy_rows_of_nodes_that_report_in_their_order():
    unhealthy = [{"node": "gpu-3", "why": "CrashLoopBackOff"}, {"node": "gpu-1", "why": "not Ready"},
                 {"node": "gpu-2", "why": "Pending"}]
    assert bcd_reporting_unhealthy(unhealthy, ["gpu-1"]) == [unhealthy[0], unhealthy[2]]
    assert bcd_reporting_unhealthy(unhealthy, []) == unhealthy
    assert bcd_reporting_unhealthy(unhealthy, ["gpu-1", "gpu-2", "gpu-3"]) == []


def test_none_is_no_rows_and_no_missing_nodes():
    assert bcd_reporting_unhealthy(None, ["gpu-1"]) == []
    assert bcd_reporting_unhealthy([{"node": "gpu-1", "why": "x"}], None) == [{"node": "gpu-1", "why": "x"}]


def test_it_is_the_collections_filter():
    assert FilterModule().filters()["bcd_reporting_unhealthy"] is bcd_reporting_unhealthy


def test_5000_rows_against_5000_missing_nodes_is_a_set_lookup():
    # every node unhealthy and missing, as before an adoption: nothing reports
    names = [f"gpu-node-{i}" for i in range(5000)]
    assert bcd_reporting_unhealthy([{"node": n, "why": "no pod"} for n in names], names) == []
