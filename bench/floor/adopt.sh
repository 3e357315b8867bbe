#!/usr/bin/env bash
# The floor for adoption: the least a careful operator does by hand to adopt a cluster with the
# same rendered manifests (render.yml's output), following the seed's "Deploy it" steps.
#
#   1. count the selected Nodes (kubectl get nodes -l <selector>)
#   2. apply the Namespace (server-side), mint a hosted join token for that many nodes
#      (curl joinTokens.create), put it in the Secret (kubectl create secret, from a 0600 file)
#   3. kubectl apply --server-side the rendered List (Namespace, ConfigMap, DaemonSet)
#   4. kubectl rollout status the DaemonSet
#   5. poll nodes.list with curl (500 a page) until every selected Node reports
#   6. revoke the token (curl joinTokens.revoke) and delete the Secret
#
# Inputs (environment): KUBECONFIG, BCD_MANIFESTS (the rendered v1 List, JSON), BCD_CP_URL,
# BCD_CP_CA, BCD_API_KEY_FILE (a file holding the API key), BCD_TENANT, BCD_POOL,
# BCD_SELECTOR (a label selector, may be empty), BCD_SECRET_NAME, BCD_SECRET_KEY,
# POLL_INTERVAL (seconds, default 2), TIMEOUT (seconds, default 1800). Needs kubectl, curl, jq.
# The API key and the token never reach a command line or the output.
set -euo pipefail

: "${KUBECONFIG:?}" "${BCD_MANIFESTS:?}" "${BCD_CP_URL:?}" "${BCD_CP_CA:?}" "${BCD_API_KEY_FILE:?}"
: "${BCD_TENANT:?}" "${BCD_POOL:?}" "${BCD_SECRET_NAME:=bcd-join}" "${BCD_SECRET_KEY:=token}"
POLL_INTERVAL=${POLL_INTERVAL:-2}
TIMEOUT=${TIMEOUT:-1800}
export KUBECONFIG

umask 077
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'Authorization: Bearer %s\n' "$(cat "$BCD_API_KEY_FILE")" > "$work/auth"

rpc() {  # rpc <procedure> <json body>: the answer on stdout; fails on a non-2xx answer
  curl -sS --fail-with-body --cacert "$BCD_CP_CA" -H @"$work/auth" -H 'Content-Type: application/json' \
    --data-binary "$2" "$BCD_CP_URL/rpc/$1"
}

ns=$(jq -r '.items[] | select(.kind == "DaemonSet") | .metadata.namespace' "$BCD_MANIFESTS")
ds=$(jq -r '.items[] | select(.kind == "DaemonSet") | .metadata.name' "$BCD_MANIFESTS")

# 1. the selected Nodes
kubectl get nodes ${BCD_SELECTOR:+-l "$BCD_SELECTOR"} -o json | jq -c '[.items[].metadata.name]' > "$work/selected"
want=$(jq length "$work/selected")
echo "floor: $want selected node(s)"

# kubectl apply reads /openapi/v2 to validate, with a 32 s limit a starved API server missed at
# 5,000 nodes (load 16); a server-side apply is idempotent, so try again, at most 3 times
apply() {
  local i
  for i in 1 2 3; do
    kubectl apply --server-side --field-manager=bcd-floor "$@" >/dev/null && return 0
    echo "floor: kubectl apply failed (try $i of 3)" >&2
  done
  return 1
}

# 2. Namespace, token, Secret
jq '.items[] | select(.kind == "Namespace")' "$BCD_MANIFESTS" > "$work/namespace.json"
apply -f "$work/namespace.json"
rpc joinTokens.create "$(jq -nc --arg t "$BCD_TENANT" --arg p "$BCD_POOL" --argjson n "$want" --arg k "floor-$$-$RANDOM" \
  '{tenant: $t, pool: $p, hosted: "kubernetes", maxUses: $n, ttlSeconds: 3600, key: $k, description: "bench floor"}')" \
  > "$work/minted"
token_id=$(jq -r .id "$work/minted")
jq -j .token "$work/minted" > "$work/token"
rm -f "$work/minted"
revoke() {
  rpc joinTokens.revoke "$(jq -nc --arg t "$BCD_TENANT" --arg id "$token_id" '{tenant: $t, id: $id}')" >/dev/null
  kubectl -n "$ns" delete secret "$BCD_SECRET_NAME" --ignore-not-found >/dev/null
  echo "floor: revoked $token_id, Secret deleted"
}
trap 'revoke; rm -rf "$work"' EXIT
kubectl -n "$ns" create secret generic "$BCD_SECRET_NAME" --from-file="$BCD_SECRET_KEY=$work/token" >/dev/null
rm -f "$work/token"

# 3, 4. apply, wait for the rollout
apply -f "$BCD_MANIFESTS"
kubectl -n "$ns" rollout status "daemonset/$ds" --timeout="${TIMEOUT}s" >/dev/null

# 5. poll nodes.list until every selected Node reports (adopting, ready or draining)
deadline=$((SECONDS + TIMEOUT))
polls=0
while :; do
  polls=$((polls + 1))
  cursor=null
  : > "$work/reporting"
  while :; do
    rpc nodes.list "$(jq -nc --arg t "$BCD_TENANT" --arg p "$BCD_POOL" --argjson c "$cursor" \
      '{tenant: $t, pool: $p, limit: 500} + (if $c == null then {} else {cursor: $c} end)')" > "$work/page"
    jq -r '.items[] | select(.state == "adopting" or .state == "ready" or .state == "draining") | .hostname' \
      "$work/page" >> "$work/reporting"
    cursor=$(jq -c .nextCursor "$work/page")
    [ "$cursor" = null ] && break
  done
  have=$(jq -R . "$work/reporting" | jq -s --slurpfile sel "$work/selected" '[.[] | select(IN($sel[0][]))] | unique | length')
  [ "$have" -ge "$want" ] && break
  if [ "$SECONDS" -ge "$deadline" ]; then echo "floor: only $have of $want nodes report after ${TIMEOUT}s" >&2; exit 1; fi
  sleep "$POLL_INTERVAL"
done
echo "floor: $have of $want nodes report after $polls poll(s)"
# 6. revoke and delete the Secret (the EXIT trap)
