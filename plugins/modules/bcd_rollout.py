#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_rollout: roll bcd's DaemonSet to a new render in stages, with health gates."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_rollout
short_description: Roll bcd's DaemonSet to a new image in stages, gate each stage on health, roll back on failure
version_added: 1.0.0
description:
  - The write half of rollout.yml (the bcd DaemonSet specification, section Upgrades), and of adopt-cluster.yml when it changes
    the pod template (other than the image) of a DaemonSet whose pods run; M(bcd.kubernetes.bcd_rollout_info)
    reads the fleet and plans.
  - With O(apply) (what rollout.yml and adopt-cluster.yml's staged rollout pass), C(state=run) applies the
    render's objects itself - server-side apply, field manager C(bcd-ansible), forcing conflicts, as the
    playbooks' kubernetes.core applies do - one PATCH each - the ConfigMap, then the DaemonSet with
    C(updateStrategy=OnDelete) (the new template, no pod moves; the DaemonSet's watch then says when its
    controller has seen it), and, once every stage passed, the DaemonSet as rendered, with its own update
    strategy (the template is unchanged, no pod moves). An apply the API server refuses fails the run naming
    the object and quoting the server; after a failed gate the rollback re-applies O(previous) instead. In
    check mode nothing is applied - the playbooks keep the kubernetes.core server-side dry run of the same
    objects for C(--check) (and C(--diff)). Without O(apply) the playbook applies the new template (OnDelete)
    before C(state=run) and the DaemonSet as rendered after it.
  - A rollout of a new pod template on the same image (a host mount, resources, the config) is
    staged and gated as an image rollout is; its headline says C(of a new pod template (image ...)).
  - A change to the ConfigMap or to the DaemonSet's own fields alone (O(template_changes=false)) rolls no
    node (the kubelet updates the mounted ConfigMap files in place). The plan says so, and so does
    C(state=run), which replaces only the pods not on the newest revision (normally none).
  - C(state=locked) takes the cluster's lock (a write, the lock Lease) and then reads the fleet under it, in
    one module run, and returns what M(bcd.kubernetes.bcd_rollout_info) returns (one module run less than
    M(bcd.kubernetes.bcd_lock) and then M(bcd.kubernetes.bcd_rollout_info)).
  - C(state=status) is deprecated (removed in 2.0.0) - it is M(bcd.kubernetes.bcd_rollout_info) (with
    O(take_lock), C(state=locked)). It still works, with a deprecation warning.
  - Only the selected Nodes roll. A C(bcd_node_selector) that selects no Node is refused (whatever
    C(bcd_rollout_force) says), naming the pods it would delete. A Node that runs a bcd pod and that the
    selector no longer selects loses bcd (its pod is deleted once the new template is applied). The plan's
    headline names each such Node, and says how many selected Nodes roll, in which stages, and how many stay;
    the table lists the same Nodes.
  - A plan whose first stage rolls every node to roll, on more than one node (no canary left), is refused
    unless C(bcd_rollout_all_at_once), since a failure there hits the whole fleet at once; with one selected
    Node it is a warning.
  - A selected Node that is down - NotReady (its Ready condition not C(True)), cordoned (C(spec.unschedulable)) or
    tainted C(node.kubernetes.io/unreachable) - is left behind - no stage rolls it or waits for it - and the plan
    and the report name it, why and what happens to it (C(left_behind) in RV(summary)). More down Nodes than
    C(bcd_rollout_max_down) (a count or a percentage of the selected Nodes rounded up; default 10%) refuse the
    rollout before any change, naming them and the variable, unless C(bcd_rollout_force) (the down Nodes are
    still left behind). Before this, any NotReady Node refused the rollout.
  - While any selected Node is down at a stage's start, that stage deletes its pods by name, as the canary does
    (the plan's next Nodes that are up; the DaemonSet stays C(OnDelete)), not through the DaemonSet controller,
    whose C(RollingUpdate) would delete the down Node's unavailable pod first and count the down Nodes against
    C(maxUnavailable). A Node left behind that is back by a later stage rolls there.
  - A rolled Node that goes down (NotReady, cordoned, gone) while a gate runs is left out of every later
    judgement, with a progress line, rather than waited out - its row says C(rolled, not verified) and
    C(not_verified) in RV(summary) names it. A rollback neither replaces nor waits for a down Node's pod. The gate's
    wake-up counts (C(numberReady)) leave the down Nodes out. The POD column of a Node that is not Ready says
    C(unknown (Node NotReady)).
  - A Node that joins the cluster during C(state=run) (its first pod has the new template, the DaemonSet being
    C(OnDelete)) is named in a note and C(joined) in RV(summary), and not gated (its bcd needs a join token -
    add-nodes.yml joins it); later stages then delete their pods by name too (its pod, not Ready, would count
    against C(maxUnavailable)), and a rollback leaves its pod as it is.
  - C(state=run) expects the new template applied with C(updateStrategy=OnDelete) (or applies it, with O(apply)). It waits
    for the DaemonSet controller to see it, then replaces the pods not on the newest revision one stage
    at a time - C(bcd_rollout_canary) nodes first, then batches of C(bcd_rollout_max_unavailable) (a count
    or a percentage of the selected Nodes rounded up).
  - The canary's pods are deleted by name (the plan's first Nodes in natural order; each DELETE names the
    pod's uid, so a pod replaced since is never deleted).
  - A batch is the DaemonSet controller's - C(state=run) sets C(updateStrategy) to C(RollingUpdate) with
    C(maxUnavailable) the batch's size (C(maxSurge) 0; a merge patch, field manager C(bcd-ansible-rollout)),
    and once the pods' watch sees that the controller has deleted the old pods of as many Nodes as the stages
    so far hold, sets C(OnDelete) again (and waits for the controller to see it) before any of the batch's new
    pods turns available, so that no further batch starts. While a batch rolls, C(minReadySeconds) is at least
    5 (restored with C(OnDelete)); with C(bcd_rollout_soak) below 5, a batch starts 6 seconds after the
    previous stage's gate passed at the earliest, once the controller counts its pods available (else it takes
    fewer at first and then more in a lump, and the batch ends larger than planned). The controller picks the batch's Nodes; the
    report names them. A batch it replaces fewer pods of than planned within C(bcd_rollout_gate_timeout)
    (it replaces no more while as many pods as the batch's size count unavailable) fails the gate, naming the
    DaemonSet; a batch of another size than planned (it deleted more before C(OnDelete) took effect) is said in
    the report's notes, and the next stage counts its extra Nodes.
  - After each stage it waits up to C(bcd_rollout_gate_timeout) for the health gate - every
    rolled Node is Ready and has a Ready pod on the new revision and image, and its bcd node still reports
    (not offline, no failing condition it did not have at the start) - and then stays so for
    C(bcd_rollout_soak) seconds (default 30, the same as the DaemonSet's C(minReadySeconds)), checked
    in full every max(2 O(interval), 1) seconds, so that a pod that turns Ready and then fails, or a node
    that stops reporting, fails the gate. A pod that cannot turn
    Ready or fails (failed, a container in C(CrashLoopBackOff) from its first restart, exited
    non-zero, restarted during the run, an invalid image, its C(bcd join) init container exited
    non-zero) fails the gate at once, naming the pod and quoting the container's last exit.
    So does a pod the API server refuses to create - the
    DaemonSet's C(FailedCreate) events (followed by a watch too) last seen since the stage began say
    a ResourceQuota, Pod Security, a ValidatingAdmissionPolicy, an admission webhook or a LimitRange
    refused it, and 6 seconds later the stage's pod is still missing, the gate fails naming the
    Nodes, quoting the reason and naming the fix. The DaemonSet and its pods are listed once, when the
    run starts, and then followed by a watch from that list's C(resourceVersion)
    (C(allowWatchBookmarks); listed again only on C(410 Gone) or a dropped watch), so the gate
    wakes on each change of a pod or of the DaemonSet and never lists the pods again
    (U(https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes)).
    A full check reads the pods as the watch saw them and lists the selected Nodes and the
    pool's nodes; it
    runs when the DaemonSet's controller counts every pod Ready and the stage's pods updated, or
    after max(2 O(interval), 1) seconds, or four times as long as the last successful check
    took if that is longer, but never more than 15 seconds (spaced out, checks do not take the
    API server's CPU from the rollout they check).
  - A failed gate stops the rollout. With C(bcd_rollout_rollback) (default) it re-applies O(previous)
    (server-side apply, field manager bcd-ansible, with OnDelete), replaces the pods not on the
    previous revision, waits up to C(bcd_rollout_gate_timeout) for them to be healthy, re-applies
    O(previous) with its own update strategy, waits up to 60 seconds for the DaemonSet controller to
    count every pod updated and available (as many as before the run at most), and fails naming
    the failed Nodes and why. The rollback succeeded only if all of that holds.
    Without, it fails at once and leaves the DaemonSet OnDelete, so nothing else rolls.
  - While it runs it renews the lock Lease O(lock) of run O(run) (every third of its duration);
    a lock another run took over stops the rollout.
  - Mints no token (a joined node keeps its identity on the host; the bcd DaemonSet specification, section What you get).
  - Returns a machine-readable RV(summary) and a printed RV(table); never a secret.
options:
  state:
    description:
      - C(run) rolls; C(locked) takes the cluster's lock and reads the fleet and the plan under it.
      - C(status) (the default, deprecated) reads and plans as M(bcd.kubernetes.bcd_rollout_info) does.
    type: str
    choices: [run, locked, status]
    default: status
  changes:
    description: With C(state=locked) (or C(status)), whether the render differs from what is applied (the dry run's answer).
    type: bool
    default: true
  template_changes:
    description:
      - With C(state=locked) (or C(status)), whether the DaemonSet's pod template differs from what is applied
        (the dry run's answer, and fields other field managers set there that the apply takes over). Only a new
        pod template replaces pods.
      - With O(changes) but not O(template_changes) (a change to the ConfigMap or to the DaemonSet's own fields
        alone - the kubelet updates the mounted ConfigMap files in place), only the pods not on the newest revision
        are to roll (normally none), and the headline says that the pod template does not change.
    type: bool
    default: true
  previous:
    description: With C(state=run), RV(previous) of the status taken before anything was applied.
    type: list
    elements: dict
  apply:
    description:
      - With C(state=run), the rendered ConfigMap and DaemonSet (as M(bcd.kubernetes.bcd_manifests) returns them) to
        apply before the first stage (the DaemonSet with C(updateStrategy=OnDelete)) and, the DaemonSet as rendered,
        after the last; see above. Ignored in check mode.
      - Omitted, the playbook applies them (kubernetes.core) around C(state=run).
    type: list
    elements: dict
  joining:
    description:
      - With C(state=locked) (or C(status)), the selected Nodes whose bcd node does not report yet and that this
        run joins (adopt-cluster.yml mints a token for them first); their pod not being Ready, or
        no bcd node reporting for them, does not refuse the rollout. The gate still waits for
        each of them to report once its pod is replaced.
    type: list
    elements: str
  run:
    description: This run's id (the lock holder's C(run=)), for the summary, the lock and its renewal; required with C(state=locked).
    type: str
  lock:
    description: The lock Lease's name in C(bcd_namespace), renewed while rolling; none renews nothing.
    type: str
  take_lock:
    description:
      - Deprecated with C(state=status); use C(state=locked), which does the same.
      - With C(state=status), first take the cluster's lock as M(bcd.kubernetes.bcd_lock) with C(wait=0)
        takes it (the Lease C(<bcd_name>-ansible-lock) in C(bcd_namespace), for C(bcd_lock_ttl)
        seconds, holder O(run)), then read the fleet under it, in the same module run. A lock another
        live run holds fails the module at once with M(bcd.kubernetes.bcd_lock)'s message and
        C(holder); nothing is read. A failed read once the lock is held fails with C(lock_held) true
        (the caller releases the lock with M(bcd.kubernetes.bcd_lock) C(state=absent)).
      - The result then also holds M(bcd.kubernetes.bcd_lock)'s C(holder), C(took_over), C(waited), C(lease) and
        C(until).
    type: bool
    default: false
  cluster:
    description: The cluster's name in the summary (C(bcd_cluster_name) or the inventory host).
    type: str
  started_at:
    description: When the run started (RFC 3339), for the summary.
    type: str
  interval:
    description: Seconds between polls while waiting (the full checks' spacing is derived from it).
    type: float
    default: 2
  watch_from:
    description:
      - For tests. The resourceVersion the first watch of the pods starts from, instead of their
        list's; one the server no longer keeps (C(1)) makes it answer C(410 Gone), and the pods
        are listed again.
    type: str
extends_documentation_fragment:
  - bcd.kubernetes.bcd
  - bcd.kubernetes.bcd.control_plane
  - bcd.kubernetes.bcd.cluster
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    support: partial
    details: C(state=run) changes nothing in check mode (nor applies O(apply)); C(state=locked) takes the lock as M(bcd.kubernetes.bcd_lock)
      does in check mode (it reports the lock it would take, writing nothing) and reads.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Take the cluster's lock and read the fleet's health, the previous render and the plan under it
  bcd.kubernetes.bcd_rollout:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    api_key: "{{ bcd_api_key | default(omit) }}"
    state: locked
    run: "{{ rollout_run }}"
  register: rollout_status

- name: Roll in stages
  bcd.kubernetes.bcd_rollout:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
    api_key: "{{ bcd_api_key | default(omit) }}"
    state: run
    previous: "{{ rollout_status.previous }}"
    run: "{{ rollout_run }}"
    lock: bcd-ansible-lock
  register: rollout_result
"""

RETURN = r"""
watch:
  description:
    - With C(state=run), what the watches of the DaemonSet, its pods, its FailedCreate events and
      the selected Nodes did - C(lists), C(relists) (after C(410 Gone) or a dropped watch),
      C(watches) (watch requests), C(events) (changes seen), C(pod_lists) and C(pod_relists)
      (the pods' alone).
  returned: when O(state=run) got past its first reads
  type: dict
summary:
  description:
    - The machine-readable report (rollout.yml writes it to C(bcd_report_out), with C(schema_version) 1, C(kube) and
      C(finished_at) added; the collection's C(docs/reports.md) lists every key). C(result) is one of
      C(unchanged), C(planned), C(refused), C(succeeded), C(failed) (a gate failed, no rollback),
      C(rolled_back), C(rollback_failed); C(from)/C(to) the image and digest; C(stages) with their
      planned C(size), their C(nodes) (with C(state=run), those rolled), outcome and seconds (a stage of another
      size than planned keeps C(planned_size) and a note); C(nodes) one row per selected Node (C(from) the short digest its
      pod ran at the start, C(to) now, C(pod), C(state) of its bcd node, C(outcome)); C(failed_nodes) with why;
      C(rollback); C(unhealthy) and C(incomplete) (locked); with C(state=locked) C(losing) (the Nodes that run a
      bcd pod and that C(bcd_node_selector) no longer selects), C(staying) (the selected Nodes that do not roll)
      and C(down) (C([{node, why}]), the down Nodes the plan leaves behind); with C(state=run) C(left_behind)
      (C([{node, why}]), the Nodes down at their turn), C(not_verified) (C([{node, why}]), rolled, then down before
      their gate judged them) and C(joined) (Nodes that joined the cluster during the run);
      timings in RFC 3339 and seconds.
  returned: always
  type: dict
table:
  description: The printed report, one line each.
  returned: always
  type: list
  elements: str
refuse:
  description: With C(state=locked) (or C(status)), why the rollout may not start (naming the Nodes), or null.
  returned: state=locked or state=status
  type: str
previous:
  description: With C(state=locked) (or C(status)), the ConfigMap and DaemonSet as they are, reduced to what their
    field managers set.
  returned: state=locked or state=status
  type: list
  elements: dict
plan:
  description:
    - The stages in order. With C(state=run), C([{name, size, nodes}]) - C(size) planned, C(nodes) the Nodes
      rolled in it (a batch's picked by the DaemonSet controller).
    - With C(state=locked), C([{name, size}]) (the canary's with its C(nodes)); RV(to_roll) the Nodes to roll.
  returned: always
  type: list
  elements: dict
to_roll:
  description: With C(state=locked) (or C(status)), the selected Nodes whose pods the rollout replaces (natural order;
    no down Node).
  returned: state=locked or state=status
  type: list
  elements: str
down:
  description: With C(state=locked) (or C(status)), C([{node, why}]) for each selected Node that is down (NotReady,
    cordoned, tainted unreachable), left behind by the rollout.
  returned: state=locked or state=status
  type: list
  elements: dict
healthy:
  description: With C(state=locked) (or C(status)), whether every selected Node is healthy and the previous rollout
    complete.
  returned: state=locked or state=status
  type: bool
revision:
  description: With C(state=locked) (or C(status)), the hash of the DaemonSet's newest ControllerRevision, or null.
  returned: state=locked or state=status
  type: str
image:
  description: With C(state=locked) (or C(status)), the image of the DaemonSet's C(bcd) container as applied now.
  returned: state=locked or state=status
  type: str
selected:
  description: With C(state=locked) (or C(status)), how many Nodes C(bcd_node_selector) selects.
  returned: state=locked or state=status
  type: int
versions:
  description:
    - With C(state=locked) (or C(status)), the C(resourceVersion) of the DaemonSet and of the ConfigMap as the fleet
      read read them, by kind (null when absent; left out when the read stopped before reading it). rollout.yml
      compares them with those M(bcd.kubernetes.bcd_field_ownership) read before the lock.
  returned: state=locked or state=status
  type: dict
holder:
  description: With C(state=locked), the lock's holder (as M(bcd.kubernetes.bcd_lock) returns it).
  returned: state=locked
  type: str
took_over:
  description: With C(state=locked), whether the lock was taken over from an expired holder.
  returned: state=locked
  type: bool
waited:
  description: With C(state=locked), seconds waited for the lock (0, it never waits).
  returned: state=locked
  type: float
lease:
  description: With C(state=locked), the lock Lease (C(namespace/name)).
  returned: state=locked
  type: str
until:
  description: With C(state=locked), when the lock expires if never released (RFC 3339).
  returned: state=locked
  type: str
lease_version:
  description:
    - The C(resourceVersion) of the lock Lease as this run last wrote it - with C(state=locked) when it took the lock,
      with C(state=run) when it renewed it - for M(bcd.kubernetes.bcd_lock) O(bcd.kubernetes.bcd_lock#module:version)
      when the run releases it.
  returned: state=locked once the lock is taken; state=run once it renewed the lock
  type: str
lock_held:
  description: With C(state=locked), on a failure once the lock was taken - the caller releases it
    (M(bcd.kubernetes.bcd_lock) C(state=absent)).
  returned: failure with the lock held
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import control_plane, inventory, kube
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout_engine import READ_OPTIONS, Rollout


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **READ_OPTIONS,
            "state": {"type": "str", "choices": ["run", "locked", "status"], "default": "status"},
            "previous": {"type": "list", "elements": "dict"},
            "apply": {"type": "list", "elements": "dict"},
            "lock": {"type": "str"},
            "interval": {"type": "float", "default": 2},
            "take_lock": {"type": "bool", "default": False},
            "watch_from": {"type": "str"},
        },
        required_if=[("take_lock", True, ("run",)), ("state", "locked", ("run",))],
        supports_check_mode=True,
    )
    state = module.params["state"]
    if state == "status":
        module.deprecate("bcd_rollout state=status is deprecated: read the fleet with bcd.kubernetes.bcd_rollout_info, "
                         "or take the lock and read under it with bcd.kubernetes.bcd_rollout state=locked "
                         "(instead of take_lock=true)", version="2.0.0", collection_name="bcd.kubernetes")
    inv = inventory(module, ("bcd_control_plane_url", "bcd_tenant", "bcd_pool"))
    if state == "run" and module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: nothing rolled", summary={}, table=[], plan=[])
    render = module.params["apply"] or []
    kinds = sorted(str(o.get("kind")) for o in render)
    if render and kinds not in (["DaemonSet"], ["ConfigMap", "DaemonSet"]):
        module.fail_json(msg=f"bcd_rollout apply: the render's ConfigMap and DaemonSet (one DaemonSet, at most one "
                             f"ConfigMap), not {', '.join(kinds)}")
    rollout = Rollout(module, inv, kube(module, inv), control_plane(module, inv))
    if state == "locked" or (module.params["take_lock"] and state == "status"):
        # the lock first, the read after it: what is read is what no other run changes meanwhile
        rollout.take_lock()
    rollout.guarded(f"bcd_rollout {state}", rollout.run if state == "run" else rollout.status)


if __name__ == "__main__":
    main()
