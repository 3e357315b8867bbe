"""add-nodes.yml against the sandbox: Nodes added after adoption join with a token for exactly them.

add-nodes.yml is adopt-cluster.yml's play with adopt_mode=add-nodes: it counts the selected Nodes
that do not report, mints one token for that many into the join Secret, never changes the
DaemonSet, waits for the Nodes, then revokes the token and deletes the Secret. The
molecule scenario `rollout` runs it too, after a rollout.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import recap, run_playbook
from tests.secrets_scan import find_in_text

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("adopted")]


def tokens(cp, cpvars) -> dict[str, dict]:
    return {t["id"]: t for t in cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"])}


def reporting(cp, cpvars) -> dict[str, str]:
    return {n["hostname"]: n["state"] for n in cp.list_nodes(cpvars["bcd_tenant"], cpvars["bcd_pool"])}


def daemonset(sandbox) -> dict:
    return json.loads(sandbox.kubectl("get", "daemonset", "-n", "bcd-system", "bcd", "-o", "json").stdout)


def test_nothing_to_join_mints_nothing(sandbox, cp, cpvars):
    before = tokens(cp, cpvars)
    run = run_playbook("add-nodes.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    assert recap(run.stdout)["sandbox"]["changed"] == 0
    assert "no token minted" in " ".join(run.stdout.split())
    assert tokens(cp, cpvars) == before


def test_two_new_nodes_join_with_a_token_for_exactly_two_then_it_is_revoked(sandbox, cp, cpvars):
    before = tokens(cp, cpvars)
    ds = daemonset(sandbox)
    new = sandbox.add_nodes(2)
    assert all(reporting(cp, cpvars).get(n) is None for n in new)

    run = run_playbook("add-nodes.yml", "-vv")
    out = run.stdout + run.stderr
    assert run.returncode == 0, run.stdout[-4000:]

    minted = {k: v for k, v in tokens(cp, cpvars).items() if k not in before}
    assert len(minted) == 1, minted
    (token,) = minted.values()
    assert token["maxUses"] == 2 and token["uses"] == 2, token
    assert token["revokedAt"], "revoked once the nodes joined"
    assert token["description"].endswith("playbook=add-nodes")
    gone = sandbox.kubectl("get", "secret", "-n", "bcd-system", "bcd-join", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, "the join Secret is deleted"

    states = reporting(cp, cpvars)
    for name in sandbox.gpu_node_names():
        assert states.get(name) in ("adopting", "ready"), (name, states.get(name))
    after = daemonset(sandbox)
    assert after["metadata"]["generation"] == ds["metadata"]["generation"], "add-nodes never changes the DaemonSet"
    assert after["spec"]["template"] == ds["spec"]["template"]
    n = len(sandbox.gpu_node_names())
    assert f"{n} of {n} selected nodes report" in out
    leaked = find_in_text(out, [cpvars["bcd_api_key"]])
    assert not leaked, "the API key leaked"


@pytest.mark.long  # slow: make test-long keeps make test within its budget
def test_a_spent_token_fails_within_seconds_naming_the_refused_node(sandbox, cp, cpvars):
    """Two new Nodes and a token for one: one joins, the other's join is refused (TokenExhausted).
    The run fails at once naming that Node and the reason, and the token is revoked, the Secret
    deleted; the next run joins it."""
    before = tokens(cp, cpvars)
    new = sandbox.add_nodes(2)
    run = run_playbook("add-nodes.yml", "-e", "bcd_token_max_uses=1")
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    assert "Traceback" not in out
    states = reporting(cp, cpvars)
    joined = [n for n in new if states.get(n) in ("adopting", "ready")]
    refused = [n for n in new if n not in joined]
    assert len(joined) == 1 and len(refused) == 1, states
    flat = " ".join(out.split())
    # the DaemonSet wait and the node wait both name the node, its pod and the refusal
    errors = [line for line in out.splitlines() if "[ERROR]" in line or "join refused" in line or "FAILED" in line]
    assert re.search(rf"{refused[0]}: pod \S+: join refused: bcd join exited 1: TokenExhausted", flat), \
        "\n".join(errors) + "\n" + out[-3000:]
    assert "not waiting out" in flat
    minted = {k: v for k, v in tokens(cp, cpvars).items() if k not in before}
    (token,) = minted.values()
    assert token["uses"] == token["maxUses"] == 1 and token["revokedAt"], token
    assert all(t["revokedAt"] for t in tokens(cp, cpvars).values()), "tokens left: 0"
    gone = sandbox.kubectl("get", "secret", "-n", "bcd-system", "bcd-join", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, "the join Secret is deleted"

    again = run_playbook("add-nodes.yml")
    assert again.returncode == 0, again.stdout[-3000:]
    assert reporting(cp, cpvars).get(refused[0]) in ("adopting", "ready")
