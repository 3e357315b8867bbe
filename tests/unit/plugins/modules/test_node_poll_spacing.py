"""The node wait's poll spacing (bcd_nodes_info.poll_spacing): short when few Nodes are missing or a
run has just started, longer when hundreds are missing."""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.modules.bcd_nodes_info import poll_spacing


def test_few_missing_polls_at_a_quarter_of_the_interval():
    assert poll_spacing(2.0, 1, elapsed=30) == 0.5
    assert poll_spacing(2.0, 25, elapsed=30) == 0.5


def test_the_spacing_grows_with_the_missing_nodes_up_to_two_and_a_half_intervals():
    assert poll_spacing(2.0, 100, elapsed=30) == 2.0
    assert poll_spacing(2.0, 200, elapsed=30) == 4.0
    assert poll_spacing(2.0, 250, elapsed=30) == 5.0
    assert poll_spacing(2.0, 1000, elapsed=30) == 5.0


def test_a_run_that_just_started_polls_at_most_every_interval():
    assert poll_spacing(2.0, 1000, elapsed=3) == 2.0
    assert poll_spacing(2.0, 10, elapsed=3) == 0.5
