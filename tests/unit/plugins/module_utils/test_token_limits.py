"""The join token's limits, named by their variables: the refusal before minting and the fix."""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.action.bcd_nodes_info import token_fix
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_token import max_uses_refusal


def test_too_few_uses_is_refused_naming_the_variable_and_the_count():
    msg = max_uses_refusal(1, 3)
    assert msg.startswith("bcd_token_max_uses is 1, below the 3 node(s) to join")
    assert "last 2 away (TokenExhausted)" in msg and "No token was minted" in msg and "at least 3" in msg


def test_an_exhausted_token_names_bcd_token_max_uses_in_the_fix():
    fix = token_fix(["gpu-node-5: pod bcd-x: join refused: bcd join exited 1: TokenExhausted: join token t has no use left"])
    assert fix is not None and "bcd_token_max_uses" in fix and "bcd_token_ttl" not in fix


def test_an_expired_token_names_bcd_token_ttl_and_the_join_wait_in_the_fix():
    fix = token_fix(["gpu-node-5: join refused: bcd join exited 1: TokenExpired: join token t expired"])
    assert fix is not None and "bcd_token_ttl" in fix and "bcd_join_timeout" in fix and "bcd_token_max_uses" not in fix


def test_other_refusals_get_no_token_fix():
    assert token_fix(["gpu-node-5: join refused: bcd join exited 1: Refused: the pool is full"]) is None
    assert token_fix([]) is None
