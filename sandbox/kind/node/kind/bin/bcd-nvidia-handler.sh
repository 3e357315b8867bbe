#!/bin/sh
# bcd-nvidia-handler.sh on|off: add or remove the `nvidia` runtime handler in this node's
# containerd config, then restart containerd when the config changed. Idempotent.
set -eu
conf=/etc/containerd/config.toml
has() { grep -q '^# BEGIN bcd nvidia handler' "$conf"; }
case "${1:-}" in
  on) has && exit 0; { echo; cat /etc/containerd/bcd-nvidia.toml; } >> "$conf" ;;
  off) has || exit 0; sed -i '/^# BEGIN bcd nvidia handler/,/^# END bcd nvidia handler/d' "$conf" ;;
  *) echo "usage: $0 on|off" >&2; exit 2 ;;
esac
systemctl restart containerd
for i in $(seq 100); do ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done
echo "containerd did not come back after the restart" >&2
exit 1
