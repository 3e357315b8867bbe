"""Time one look of our waits at the bcd pods of a running cluster (``python -m bench.waits``).

A wait (``bcd_daemonset_wait``, ``bcd_nodes`` with ``refusals``/``pods``) follows the bcd pods
with a watch and, after the changes it sees, looks at all of them again: that look is the CPU a
wait spends per change, and the waits space the looks by 4 times their length (the DaemonSet wait
also by 0.2 ms per pod, and it judges again only the pods its watch replaced since its last look:
``bcd_daemonset_wait.Judge``).
This reads the pods (and the DaemonSet) once from the cluster of ``KUBECONFIG`` (default the bench
sandbox's), slims them as the watch keeps them, and times each step of a look, best of
``--repeat``, with an optional cProfile of the whole look. Read-only.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _kubectl(kubeconfig: str, *args: str) -> dict:
    done = subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", *args, "-o", "json"], capture_output=True, text=True,
                          check=False, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def best(fn, repeat: int) -> float:
    """Seconds of the fastest of ``repeat`` calls (the machine is shared: the others waited on it)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", str(ROOT / ".sandbox-bench" / "kubeconfig")))
    parser.add_argument("--namespace", default="bcd-system")
    parser.add_argument("--name", default="bcd")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--limit", type=int, default=5000, help="read at most this many pods (one request)")
    parser.add_argument("--spread", type=int, default=0,
                        help="copy the pods read onto gpu-node-1..N (one each, in turn) to time N pods")
    parser.add_argument("--profile", action="store_true", help="print the top of a cProfile of one whole look")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "collections"))
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_health import (
        failing_pods,
        unhealthy_pods,
    )
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import pod_ready, slim_pod
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import pods_by_node
    from ansible_collections.bcd.kubernetes.plugins.modules.bcd_daemonset_wait import Judge, cannot_start
    from ansible_collections.bcd.kubernetes.plugins.modules.bcd_nodes import refused_joins

    t0 = time.perf_counter()
    # one page: a list of every pod outlasted 60 s (and its continue token, 5 min) on a starved API server
    done = subprocess.run(["kubectl", f"--kubeconfig={args.kubeconfig}", "get", "--raw",
                           f"/api/v1/namespaces/{args.namespace}/pods?labelSelector=app.kubernetes.io%2Fname%3Dbcd"
                           f"&limit={args.limit}"], capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"listing the bcd pods: {done.stderr.strip()}")
    raw = json.loads(done.stdout)["items"]
    ds = _kubectl(args.kubeconfig, "-n", args.namespace, "get", "daemonset", args.name)
    listed = time.perf_counter() - t0
    if args.spread and raw:
        copies = []
        for i in range(args.spread):
            pod = json.loads(json.dumps(raw[i % len(raw)]))
            pod["metadata"]["uid"] = f"{pod['metadata']['uid']}-{i}"
            pod["metadata"]["name"] = f"{pod['metadata']['name']}-{i}"
            pod["spec"]["nodeName"] = f"gpu-node-{i + 1}"
            for term in ((((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                          .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []):
                for field in term.get("matchFields") or []:
                    field["values"] = [f"gpu-node-{i + 1}"]
            copies.append(pod)
        raw = copies
    pods = [slim_pod(p) for p in raw]
    names = sorted({(p.get("spec") or {}).get("nodeName") for p in pods} - {None})
    since = "1970-01-01T00:00:00Z"
    uid = ds["metadata"]["uid"]

    def ds_look(judge=None):
        # as bcd_daemonset_wait looks: a Judge keeps each pod's verdict until the watch replaces it
        judge = judge or Judge(since)
        judged = judge.by_node(pods, ds)
        cannot_start({n: p for n, (p, _) in judged.items()}, since, ds, None, judge)
        return [n for n, (_, v) in judged.items() if not v.ready]

    kept = Judge(since)
    ds_look(kept)
    changed_every = 20  # one pod in 20 replaced, as a watch replaces a pod that changed

    def ds_next_look():
        for i in range(0, len(pods), changed_every):
            pods[i] = dict(pods[i])
        return ds_look(kept)

    def nodes_look():
        refused = refused_joins(pods, names, {}, since)
        by_node = pods_by_node(pods)
        unhealthy_pods(names, by_node, since=since)
        failing_pods([n for n in names if n not in refused], by_node, since)

    by_node = pods_by_node(pods, uid)
    steps = {
        "slim_pod (each pod, as the watch keeps it)": lambda: [slim_pod(p) for p in raw],
        "pods_by_node": lambda: pods_by_node(pods, uid),
        "cannot_start (every pod judged)": lambda: cannot_start(by_node, since, ds, None),
        "not Ready": lambda: [n for n in by_node if not pod_ready(by_node[n])],
        "refused_joins": lambda: refused_joins(pods, names, {}, since),
        "unhealthy_pods": lambda: unhealthy_pods(names, by_node, since=since),
        "failing_pods": lambda: failing_pods(names, by_node, since),
        "DaemonSet wait, one look, every pod judged": ds_look,
        "DaemonSet wait, next look, 1 pod in 20 changed": ds_next_look,
        "node wait, one look": nodes_look,
    }
    ready = sum(1 for p in by_node.values() if pod_ready(p))
    load = os.getloadavg()
    print(f"{len(pods)} bcd pods on {len(names)} nodes ({ready} Ready), listed in {listed:.1f}s; "
          f"load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    for what, fn in steps.items():
        print(f"  {what:<45} {best(fn, args.repeat) * 1000:9.1f} ms")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        ds_look()
        nodes_look()
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(20)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
