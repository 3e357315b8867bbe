"""bcd_api_reason: the API server's reason inside a failed kubernetes.core task's message."""

from __future__ import annotations

import json

from ansible_collections.bcd.kubernetes.plugins.filter.bcd_api_reason import bcd_api_reason

FORBIDDEN = ('clusterpolicies.nvidia.com is forbidden: User "system:serviceaccount:default:releaser" cannot list '
             'resource "clusterpolicies" in API group "nvidia.com" at the cluster scope')


def _status(message: str) -> str:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                       "reason": "Forbidden", "details": {"group": "nvidia.com", "kind": "clusterpolicies"},
                       "code": 403}, separators=(",", ":"))


def test_the_status_message_of_a_403_unquoted():
    # as kubernetes.core's k8s_info words it (its service module quotes the client's exception)
    msg = ("Exception '(403)\nReason: Forbidden\nHTTP response headers: HTTPHeaderDict({'Audit-Id': 'x'})\n"
           f"HTTP response body: {_status(FORBIDDEN)}\n\n' raised while trying to get resource using (name=None, "
           "namespace=None, label_selectors=[], field_selectors=[])")
    assert bcd_api_reason(msg) == FORBIDDEN


def test_without_a_status_the_first_line():
    assert bcd_api_reason("\nFailed to find exact match for nvidia.com/v1.ClusterPolicy\nmore") == (
        "Failed to find exact match for nvidia.com/v1.ClusterPolicy")
    assert bcd_api_reason("HTTP response body: {not json") == "HTTP response body: {not json"
    assert bcd_api_reason(f"HTTP response body: {json.dumps({'message': 7})}") == 'HTTP response body: {"message": 7}'


def test_empty_missing_and_long():
    assert bcd_api_reason(None) == "" and bcd_api_reason("") == ""
    assert bcd_api_reason("x" * 400) == "x" * 297 + "..."
    assert bcd_api_reason(f"HTTP response body: {_status(FORBIDDEN)}", limit=20) == FORBIDDEN[:17] + "..."
