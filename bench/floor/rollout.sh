#!/usr/bin/env bash
# The floor for a rollout: the least a careful operator does by hand to move bcd's DaemonSet to
# a new image, with the DaemonSet controller's own rolling update and the same maxUnavailable
# as rollout.yml's bcd_rollout_max_unavailable:
#
#   kubectl patch the update strategy (RollingUpdate, maxUnavailable), kubectl set image,
#   kubectl rollout status.
#
# Inputs (environment): KUBECONFIG, BCD_NAMESPACE (default bcd-system), BCD_NAME (default bcd),
# BCD_IMAGE (the new image, pinned by digest), MAX_UNAVAILABLE (a count or a percentage, default
# 1), TIMEOUT (seconds, default 1800). Needs kubectl.
set -euo pipefail

: "${KUBECONFIG:?}" "${BCD_IMAGE:?}"
ns=${BCD_NAMESPACE:-bcd-system}
ds=${BCD_NAME:-bcd}
mu=${MAX_UNAVAILABLE:-1}
export KUBECONFIG

case "$mu" in *%) mu_json="\"$mu\"" ;; *) mu_json=$mu ;; esac
kubectl -n "$ns" patch "daemonset/$ds" --type=merge \
  -p "{\"spec\":{\"updateStrategy\":{\"type\":\"RollingUpdate\",\"rollingUpdate\":{\"maxUnavailable\":$mu_json,\"maxSurge\":0}}}}" >/dev/null
kubectl -n "$ns" set image "daemonset/$ds" "bcd=$BCD_IMAGE" >/dev/null
kubectl -n "$ns" rollout status "daemonset/$ds" --timeout="${TIMEOUT:-1800}s" >/dev/null
echo "floor: daemonset/$ds rolled out to $BCD_IMAGE (maxUnavailable $mu)"
