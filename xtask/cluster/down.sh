#!/bin/bash
# Tear down the cluster started by up.sh: no processes, mounts, netns, interfaces,
# cgroups or containerd/kubelet/etcd state are left. Keeps the cached source, Go build
# cache, binaries and image tarballs under /root/.cache/tandem-kubernetes (not $RUN).
# Idempotent: safe to run when nothing is up. Fails (exit 1) when anything it made is left.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/common.sh"

# pids of processes belonging to this cluster: pgrep on our exact binary path / our own
# config or state paths (never a bare program name), then double-checked via /proc/PID/exe
our_pids() {
  local want=$1 pat exe p
  case "$want" in
    kube-*|kubelet) pat="^($BIN/)?$want( |\$)"; exe="$BIN/$want" ;;
    etcd)       pat="^etcd .*--data-dir $RUN/etcd( |\$)"; exe=/usr/bin/etcd ;;
    containerd) pat="^containerd --config $CONF/containerd.toml"; exe=/usr/bin/containerd ;;
    registry)   pat="^docker-registry serve $CONF/registry.yml"; exe=/usr/bin/docker-registry ;;
    shim)       pat="containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK( |\$)"; exe=/usr/bin/containerd-shim-runc-v2 ;;
  esac
  for p in $(pgrep -f -- "$pat"); do
    [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$exe" ] && echo "$p"
  done
}

# running = exists and not a zombie (our daemons are re-parented to PID 1, which may reap late)
running() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

stop() {  # stop NAME: SIGTERM, wait up to 15 s, then SIGKILL
  local name=$1 pids p i
  pids=$( { alive_pid "$name" 2>/dev/null; our_pids "$name"; } | sort -u)
  [ -n "$pids" ] || return 0
  log "stopping $name ($(echo $pids))"
  kill -TERM $pids 2>/dev/null
  for ((i = 0; i < 75; i++)); do
    for p in $pids; do running "$p" && break; p=; done
    [ -z "$p" ] && break
    sleep 0.2
  done
  for p in $pids; do running "$p" && { log "SIGKILL $name $p"; kill -KILL "$p"; }; done
  rm -f "$PIDS/$name.pid"
}

kill_pod_processes() {  # everything inside the kubelet's kubepods cgroups (pod containers)
  local f p n=0
  for f in $(find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods -name cgroup.procs 2>/dev/null); do
    for p in $(cat "$f" 2>/dev/null); do kill -KILL "$p" 2>/dev/null && n=$((n + 1)); done
  done
  [ $n = 0 ] || log "killed $n leftover pod processes"
}

# 1. kubelet first, so nothing restarts pods
stop kubelet

# 2. pod containers: via containerd while it still runs, then anything left in kubepods cgroups
if [ -S "$CONTAINERD_SOCK" ] && [ -n "$(our_pids containerd)" ]; then
  c="ctr --address $CONTAINERD_SOCK -n k8s.io"
  for t in $($c tasks ls -q 2>/dev/null); do $c tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
  sleep 0.5
  for t in $($c tasks ls -q 2>/dev/null); do $c tasks rm -f "$t" >/dev/null 2>&1; done
fi
kill_pod_processes

# 3. control plane, etcd, registry, containerd, shims
stop kube-scheduler
stop kube-controller-manager
stop kube-apiserver
stop etcd
stop registry
stop containerd
kill_pod_processes
stop shim

# 4. mounts (deepest first): rootfs overlays, shm, netns bind mounts, kubelet volumes
mounts() {
  awk '{print $5}' /proc/self/mountinfo | sed 's/\\040/ /g' |
    grep -E -e "^($CONTAINERD_STATE|$CONTAINERD_ROOT|$KUBELET_ROOT|$RUN)(/|\$)" -e '^(/var)?/run/netns/cni-' |
    awk '{print length, $0}' | sort -rn | cut -d' ' -f2-
}
for pass in 1 2 3 4; do
  m=$(mounts); [ -n "$m" ] || break
  while IFS= read -r mp; do umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null; done <<< "$m"
  # containerd bind-mounts /run/netns onto itself; a netns mounted before that bind sits under
  # it, out of umount's reach: take the bind away (never lazily: it stays while anything is
  # mounted in it, another program's netns included) and look again
  mountpoint -q /run/netns && umount /run/netns 2>/dev/null
done
failed=0
[ -z "$(mounts)" ] || { log "LEFT: mounts: $(mounts | tr '\n' ' ')"; failed=1; }
rm -f /run/netns/cni-* 2>/dev/null
# containerd's netns helper bind-mounts /run/netns onto itself (shared); drop it if nothing else uses it
if [ -d /run/netns ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
  # never lazily: a netns another program mounts meanwhile must stay reachable
  while mountpoint -q /run/netns; do umount /run/netns 2>/dev/null || break; done
  rmdir /run/netns 2>/dev/null || true
fi

# 5. network: veths still enslaved to cni0, then the bridge
if ip link show cni0 >/dev/null 2>&1; then
  for v in $(ip -o link show master cni0 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link del "$v" 2>/dev/null
  done
  ip link del cni0 && log "deleted bridge cni0"
fi

# 6. cgroups created by the kubelet (cgroupfs driver) in every hierarchy
for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
  [ -d "$h/kubepods" ] || continue
  find "$h/kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null
  [ -d "$h/kubepods" ] && { log "LEFT: cgroup $h/kubepods"; failed=1; }
done

# 7. state on disk
rm -rf "$CONTAINERD_ROOT" "$CONTAINERD_STATE" "$KUBELET_ROOT" /var/lib/cni /var/log/pods /var/log/containers "$RUN"
# discovery cache of a plain `kubectl --kubeconfig $RUN/admin.kubeconfig ...` (scripts use --cache-dir under $RUN)
rm -rf "$HOME/.kube/cache/discovery/127.0.0.1_$APISERVER_PORT"

# 8. report anything left
left=$(for n in kubelet kube-apiserver kube-controller-manager kube-scheduler etcd registry containerd shim; do our_pids $n; done)
[ -z "$left" ] || { log "LEFT: processes: $left"; failed=1; }
ip link show cni0 >/dev/null 2>&1 && { log "LEFT: the bridge cni0"; failed=1; }
ip -o link show type veth 2>/dev/null | grep -q . && log "NOTE: veth interfaces exist: $(ip -o link show type veth | awk -F': ' '{print $2}' | tr '\n' ' ')"
if [ $failed = 0 ]; then
  log "down: done, nothing left"
else
  log 'down: something was left (above); run cargo xtask cluster down again, or remove it by hand'
  exit 1
fi
