#!/bin/sh
# On a hybrid cgroup v1 host the kubelet refuses to start while kubelet.slice or kubelet is
# missing in any v1 hierarchy it checks (hugetlb included): create them all first.
for d in /sys/fs/cgroup/*/; do
  case "$d" in */unified/) continue ;; esac
  mkdir -p "${d}kubelet.slice" "${d}kubelet" 2>/dev/null || true
done
exit 0
