# Shared settings for up.sh / down.sh (sourced, not executed).
# One-node Kubernetes v1.20.2 on 127.0.0.1, built from Debian bookworm's
# `kubernetes` source package.

K8S_VERSION=v1.20.2
CACHE=/root/.cache/tandem-kubernetes           # survives down.sh (source, binaries, go cache)
BIN="$CACHE/$K8S_VERSION/bin"                  # cached kube-* binaries
SRC_PARENT="$CACHE/src"                        # apt-get source kubernetes unpacks here
GOCACHE_DIR="$CACHE/gocache"
RUN="$CACHE/run"                               # all per-cluster state; removed by down.sh
PKI="$RUN/pki"
LOGS="$RUN/logs"
PIDS="$RUN/pids"
CONF="$RUN/conf"
KUBECONFIG_ADMIN="$RUN/admin.kubeconfig"

# Runtime paths that are not under $RUN (fixed by kubelet / convenient for ctr):
CONTAINERD_ROOT=/var/lib/containerd
CONTAINERD_STATE=/run/containerd
CONTAINERD_SOCK=/run/containerd/containerd.sock
KUBELET_ROOT=/var/lib/kubelet

APISERVER_PORT=6443
ETCD_CLIENT_PORT=2379
ETCD_PEER_PORT=2380
REGISTRY_ADDR=127.0.0.1:5000
SERVICE_CIDR=10.96.0.0/24                      # first IP 10.96.0.1 = kubernetes.default
POD_CIDR=10.244.0.0/24                          # only on the cni0 bridge, no gateway, no NAT
PAUSE_IMAGE=k8s.gcr.io/pause:3.4              # built from build/pause/linux/pause.c (TAG 3.4 in this tree)
BUSYBOX_IMAGE=docker.io/tandem/busybox:1.35    # imported with ctr
REGISTRY_IMAGE="$REGISTRY_ADDR/tandem/busybox:1.35"  # pushed to / pulled from the loopback registry

export PATH="$BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# pid of a component we started, if still alive (empty otherwise)
alive_pid() {
  local f="$PIDS/$1.pid" p
  [ -f "$f" ] || return 1
  p=$(cat "$f")
  # alive, not a zombie, and still the program we started (guards against pid reuse)
  [ -n "$p" ] && [ -r "/proc/$p/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$p/status" &&
    tr '\0' ' ' < "/proc/$p/cmdline" | grep -q -- "$1" && echo "$p"
}
