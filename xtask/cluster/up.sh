#!/bin/bash
# Bring up a one-node Kubernetes v1.20.2 cluster on 127.0.0.1.
#   up.sh            everything (idempotent: running components are left alone)
#   up.sh build      only install packages + build/cache the binaries
# State: /root/.cache/tandem-kubernetes/run (admin kubeconfig: run/admin.kubeconfig)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/common.sh"

PKGS=(dpkg-dev golang-go golang-github-modern-go-reflect2-dev etcd-server containerd runc
      containernetworking-plugins docker-registry busybox-static openssl gcc libc6-dev
      iproute2 curl procps bc)

ensure_packages() {
  local missing=() p need_update=0
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  # deb-src for bookworm, same mirror as the deb lines
  if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
    local uri
    uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$uri" ] || uri=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    [ -n "$uri" ] || uri=http://deb.debian.org/debian
    log "adding deb-src $uri bookworm"
    cat > /etc/apt/sources.list.d/debian-src.sources <<EOF
Types: deb-src
URIs: $uri
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    need_update=1
  fi
  if [ ${#missing[@]} -gt 0 ] || [ $need_update = 1 ]; then
    log "apt-get update"
    apt-get update -q >/dev/null
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing: ${missing[*]}"
    # keep package postinst scripts from starting etcd/containerd/registry daemons
    local made_policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; made_policy=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    [ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d
  fi
}

build_binaries() {
  local bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl) b need=0
  for b in "${bins[@]}"; do [ -x "$BIN/$b" ] || need=1; done
  if [ $need = 0 ]; then log "binaries cached in $BIN"; return; fi
  mkdir -p "$SRC_PARENT"
  local src
  src=$(ls -d "$SRC_PARENT"/kubernetes-*/ 2>/dev/null | head -n1 || true)
  if [ -z "$src" ]; then
    log "apt-get source kubernetes"
    (cd "$SRC_PARENT" && apt-get source -q kubernetes >/dev/null 2>&1) || {
      apt-get update -q >/dev/null   # deb-src line present but its index never fetched
      (cd "$SRC_PARENT" && apt-get source -q kubernetes >/dev/null 2>&1)
    } || die "apt-get source kubernetes failed"
    src=$(ls -d "$SRC_PARENT"/kubernetes-*/ | head -n1)
  fi
  src=${src%/}
  case "$src" in *1.20.2*) ;; *) die "unexpected kubernetes source $src (want 1.20.2)";; esac
  # vendored reflect2 v1.0.1 breaks under Go >=1.18 (apiserver crashes on first CR write);
  # swap in Debian's v1.0.2 (vendor/modules.txt still says v1.0.1; only the files change)
  log "replacing vendored github.com/modern-go/reflect2 with Debian's 1.0.2"
  rm -rf "$src/vendor/github.com/modern-go/reflect2"
  mkdir -p "$src/vendor/github.com/modern-go/reflect2"
  (cd /usr/share/gocode/src/github.com/modern-go/reflect2 && \
     find . -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' -o -name LICENSE \) ! -name '*_test.go' \
       -exec cp {} "$src/vendor/github.com/modern-go/reflect2/" \;)
  local epoch ver_ldflags
  epoch=$(cd "$src" && dpkg-parsechangelog -STimestamp)
  local bd; bd=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
  ver_ldflags=""
  # GOPATH mode: vendored packages live under k8s.io/kubernetes/vendor/... (as in hack/lib/version.sh);
  # gitCommit is already in the tarball (git archive export-subst)
  for pkg in k8s.io/kubernetes/vendor/k8s.io/component-base/version k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
    ver_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=20"
    ver_ldflags+=" -X $pkg.gitTreeState=archive -X $pkg.buildDate=$bd"
  done
  log "building ${bins[*]} (go $(go env GOVERSION), offline, vendored) -> $BIN"
  local t0=$SECONDS
  rm -rf "$BIN.tmp"; mkdir -p "$BIN.tmp"
  # Kubernetes 1.20 builds in GOPATH mode (hack/lib/init.sh sets GO111MODULE=off); module
  # mode with -mod=vendor fails under go1.19 ("updates to go.mod needed"). Vendor dir is used
  # either way, nothing is downloaded (GOPROXY=off), staging repos come via vendor/k8s.io symlinks.
  mkdir -p "$src/.go/src/k8s.io"
  [ -L "$src/.go/src/k8s.io/kubernetes" ] || ln -s ../../.. "$src/.go/src/k8s.io/kubernetes"
  local genv=(env GO111MODULE=off GOPATH="$src/.go" GOFLAGS= GOPROXY=off GOSUMDB=off CGO_ENABLED=0 GOCACHE="$GOCACHE_DIR")
  # pkg/generated/openapi/zz_generated.openapi.go is not in the tarball (upstream `make`
  # generates it; all other generated code is checked in). Same inputs as Makefile.generated_files.
  if [ ! -s "$src/pkg/generated/openapi/zz_generated.openapi.go" ]; then
    log "generating pkg/generated/openapi/zz_generated.openapi.go with vendored openapi-gen"
    (cd "$src/.go/src/k8s.io/kubernetes" && \
      "${genv[@]}" go build -o "$src/.go/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen && \
      dirs=$(find -H . \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune -o -type f -name '*.go' -print \
              | sed 's|^./staging/src|vendor|; s|^\./||' | xargs grep -l '^// *+k8s:' | xargs grep -l '+k8s:openapi-gen=' \
              | xargs -n1 dirname | grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' \
              | LC_ALL=C sort -u | sed 's|^|k8s.io/kubernetes/|' | paste -sd,) && \
      "${genv[@]}" "$src/.go/openapi-gen" --logtostderr -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi \
        -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
        -r "$src/.go/openapi-violations.report" && \
      diff -q "$src/.go/openapi-violations.report" api/api-rules/violation_exceptions.list >/dev/null) \
      || die "openapi generation failed"
  fi
  (cd "$src/.go/src/k8s.io/kubernetes" && env GO111MODULE=off GOPATH="$src/.go" GOFLAGS= \
       GOPROXY=off GOSUMDB=off CGO_ENABLED=0 GOCACHE="$GOCACHE_DIR" \
       go build -trimpath -tags selinux,notest -ldflags "-s -w $ver_ldflags" -o "$BIN.tmp/" \
         $(printf 'k8s.io/kubernetes/cmd/%s ' "${bins[@]}"))
  rm -rf "$BIN"; mv "$BIN.tmp" "$BIN"
  log "build done in $((SECONDS - t0)) s"
}


# ---------------------------------------------------------------- images
IMAGES="$CACHE/$K8S_VERSION/images"

# make_oci_image ROOTFS_DIR NAME ENTRYPOINT_JSON CMD_JSON OUT_TAR
# Hand-assembled OCI image layout (one uncompressed layer), reproducible (mtime 0, sorted).
make_oci_image() {
  local rootfs=$1 name=$2 ep=$3 cmd=$4 out=$5 w
  w=$(mktemp -d); mkdir -p "$w/oci/blobs/sha256"
  tar -C "$rootfs" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$w/layer.tar" .
  local ld ls cd cs md ms
  ld=$(sha256sum "$w/layer.tar" | cut -d' ' -f1); ls=$(stat -c %s "$w/layer.tar")
  mv "$w/layer.tar" "$w/oci/blobs/sha256/$ld"
  printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Entrypoint":%s,"Cmd":%s,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"tandem up.sh make_oci_image"}]}' \
    "$ep" "$cmd" "$ld" > "$w/config.json"
  cd=$(sha256sum "$w/config.json" | cut -d' ' -f1); cs=$(stat -c %s "$w/config.json")
  mv "$w/config.json" "$w/oci/blobs/sha256/$cd"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$cd" "$cs" "$ld" "$ls" > "$w/manifest.json"
  md=$(sha256sum "$w/manifest.json" | cut -d' ' -f1); ms=$(stat -c %s "$w/manifest.json")
  mv "$w/manifest.json" "$w/oci/blobs/sha256/$md"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$md" "$ms" "$name" "${name##*:}" > "$w/oci/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' > "$w/oci/oci-layout"
  tar -C "$w/oci" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$out.tmp" oci-layout index.json blobs
  mv "$out.tmp" "$out"; rm -rf "$w"
}

build_images() {
  mkdir -p "$IMAGES"
  local src; src=$(ls -d "$SRC_PARENT"/kubernetes-*/ | head -n1)
  if [ ! -s "$IMAGES/pause.oci.tar" ]; then
    log "building pause image ($PAUSE_IMAGE) from build/pause/linux/pause.c"
    local r; r=$(mktemp -d); chmod 755 "$r"
    gcc -Os -Wall -Werror -static -DVERSION=v3.4-debian-1.20.2 -o "$r/pause" "$src/build/pause/linux/pause.c"
    strip "$r/pause"
    make_oci_image "$r" "$PAUSE_IMAGE" '["/pause"]' 'null' "$IMAGES/pause.oci.tar"
    rm -rf "$r"
  fi
  if [ ! -s "$IMAGES/busybox.oci.tar" ] || [ ! -s "$IMAGES/busybox-registry.oci.tar" ]; then
    log "building busybox images from Debian busybox-static"
    local r; r=$(mktemp -d); chmod 755 "$r"
    mkdir -p "$r"/{bin,etc,tmp,root,var/www} && chmod 1777 "$r/tmp"
    cp /bin/busybox "$r/bin/busybox"
    local a
    for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$r/bin/$a"; done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$r/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' > "$r/etc/group"
    echo "hello from the imported busybox image" > "$r/var/www/index.html"
    make_oci_image "$r" "$BUSYBOX_IMAGE" 'null' '["sh"]' "$IMAGES/busybox.oci.tar"
    # a distinct image (different layer) that only ever reaches containerd through the registry
    echo "hello from the loopback registry image" > "$r/var/www/index.html"
    make_oci_image "$r" "$REGISTRY_IMAGE" 'null' '["sh"]' "$IMAGES/busybox-registry.oci.tar"
    rm -rf "$r"
  fi
}

# ---------------------------------------------------------------- PKI
# sign NAME SUBJ EXT   (key + cert signed by our CA)
sign() {
  local n=$1 subj=$2 ext=$3
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$n.key" -out "$PKI/$n.csr" -subj "$subj" 2>/dev/null
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n%b\n' "$ext" > "$PKI/$n.ext"
  openssl x509 -req -in "$PKI/$n.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days 3650 -sha256 -extfile "$PKI/$n.ext" -out "$PKI/$n.crt" 2>/dev/null
  rm -f "$PKI/$n.csr" "$PKI/$n.ext"
}

kubeconfig() {  # kubeconfig FILE CERTNAME
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tandem
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$2.crt")
    client-key-data: $(base64 -w0 "$PKI/$2.key")
contexts:
- name: tandem
  context: {cluster: tandem, user: $2}
current-context: tandem
EOF
  chmod 600 "$1"
}

make_pki() {
  [ -s "$PKI/done" ] && return
  log "generating CA, certificates, service-account keys and kubeconfigs in $PKI"
  rm -rf "$PKI"; mkdir -p "$PKI"; chmod 700 "$PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -days 3650 -sha256 \
    -subj "/CN=tandem-kubernetes-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
  sign apiserver "/CN=kube-apiserver" \
    'extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local'
  sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" 'extendedKeyUsage=clientAuth'
  sign admin "/O=system:masters/CN=kubernetes-admin" 'extendedKeyUsage=clientAuth'
  sign controller-manager "/CN=system:kube-controller-manager" 'extendedKeyUsage=clientAuth'
  sign scheduler "/CN=system:kube-scheduler" 'extendedKeyUsage=clientAuth'
  sign kubelet-client "/O=system:nodes/CN=system:node:localhost" 'extendedKeyUsage=clientAuth'
  sign kubelet-serving "/CN=localhost" 'extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1'
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  kubeconfig "$KUBECONFIG_ADMIN" admin
  kubeconfig "$CONF/controller-manager.kubeconfig" controller-manager
  kubeconfig "$CONF/scheduler.kubeconfig" scheduler
  kubeconfig "$CONF/kubelet.kubeconfig" kubelet-client
  echo ok > "$PKI/done"
}

# ---------------------------------------------------------------- configs
# put FILE < content: write only if changed, atomically (containerd watches the CNI dir;
# rewriting the conflist in place on a re-run made it log a failed reload)
put() {
  local f=$1
  cat > "$f.tmp.$$"
  if cmp -s "$f.tmp.$$" "$f"; then rm -f "$f.tmp.$$"; else mv -f "$f.tmp.$$" "$f"; fi
}

write_configs() {
  mkdir -p "$CONF/cni" "$CONF/certs.d/$REGISTRY_ADDR" "$RUN/registry" "$RUN/cni-ipam"
  # bridge on this machine only: no gateway on the bridge, no default route, no NAT
  put "$CONF/cni/10-tandem-bridge.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "tandem-pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": false,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "dataDir": "$RUN/cni-ipam"
      }
    }
  ]
}
EOF
  put "$CONF/certs.d/$REGISTRY_ADDR/hosts.toml" <<EOF
server = "http://$REGISTRY_ADDR"

[host."http://$REGISTRY_ADDR"]
  capabilities = ["pull", "resolve", "push"]
  skip_verify = true
EOF
  put "$CONF/containerd.toml" <<EOF
version = 2
root = "$CONTAINERD_ROOT"
state = "$CONTAINERD_STATE"
# opt plugin would create /opt/containerd; the others just log noise
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$CONTAINERD_SOCK"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # root here lacks CAP_SYS_RESOURCE: never try to lower oom_score_adj below containerd's own
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$CONF/cni"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    # 127.0.0.1:5000 -> plain http (hosts.toml)
    config_path = "$CONF/certs.d"
EOF
  put "$CONF/registry.yml" <<EOF
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $RUN/registry
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDR
EOF
  put "$CONF/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
cgroupDriver: cgroupfs
failSwapOn: false
# no CAP_SYS_RESOURCE: do not try to give the kubelet itself oom_score_adj -999
oomScoreAdj: 0
# do not add KUBE-FIREWALL / KUBE-MARK-* iptables chains to the host
makeIPTablesUtilChains: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
# the disk is shared with other jobs: do not evict/taint on disk pressure, do not GC images
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 50
EOF
}

# ---------------------------------------------------------------- processes
start_bg() {  # start_bg NAME CMD...   (new session, output to $LOGS/NAME.log)
  local name=$1 p; shift
  if p=$(alive_pid "$name"); then log "$name already running (pid $p)"; return 0; fi
  log "starting $name"
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! > "$PIDS/$name.pid"
}

wait_for() {  # wait_for WHAT TIMEOUT_S CMD...
  local what=$1 t=$2 i; shift 2
  for ((i = 0; i < t * 5; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  die "timed out after ${t}s waiting for $what (see $LOGS)"
}

kc() { kubectl --kubeconfig "$KUBECONFIG_ADMIN" --cache-dir "$RUN/kubectl-cache" "$@"; }
node_ready() { [ "$(kc get node localhost -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
port_free_or_ours() {  # refuse to start if something else already listens there
  local port=$1 name=$2
  if ! alive_pid "$name" >/dev/null && ss -Hltn "sport = :$port" | grep -q .; then
    die "127.0.0.1:$port is already in use by something else: $(ss -Hltnp "sport = :$port")"
  fi
}

start_all() {
  mkdir -p "$LOGS" "$PIDS"
  port_free_or_ours $ETCD_CLIENT_PORT etcd; port_free_or_ours $APISERVER_PORT kube-apiserver
  port_free_or_ours 5000 registry; port_free_or_ours 10250 kubelet

  start_bg etcd etcd --name tandem --data-dir "$RUN/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "tandem=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
    --logger zap --log-level warn
  start_bg containerd containerd --config "$CONF/containerd.toml"
  start_bg registry docker-registry serve "$CONF/registry.yml"

  wait_for etcd 60 curl -fsS "http://127.0.0.1:$ETCD_CLIENT_PORT/health"
  start_bg kube-apiserver "$BIN/kube-apiserver" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$APISERVER_PORT --insecure-port=0 \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --service-cluster-ip-range=$SERVICE_CIDR \
    --client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=Hostname \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --allow-privileged=true \
    --endpoint-reconciler-type=none --profiling=false --v=1

  wait_for containerd 60 ctr --address "$CONTAINERD_SOCK" version
  import_images &   # overlaps with apiserver start-up
  local import_pid=$!

  wait_for kube-apiserver 120 kc get --raw /readyz
  start_bg kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$CONF/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$CONF/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$CONF/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --port=0 --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --service-cluster-ip-range=$SERVICE_CIDR --allocate-node-cidrs=false \
    --profiling=false --v=1
  start_bg kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig="$CONF/scheduler.kubeconfig" \
    --authentication-kubeconfig="$CONF/scheduler.kubeconfig" \
    --authorization-kubeconfig="$CONF/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --port=0 --leader-elect=false --profiling=false --v=1

  wait "$import_pid" || die "image import failed (see $LOGS/images.log)"
  start_bg kubelet "$BIN/kubelet" \
    --config="$CONF/kubelet.yaml" --kubeconfig="$CONF/kubelet.kubeconfig" \
    --container-runtime=remote --container-runtime-endpoint="unix://$CONTAINERD_SOCK" \
    --image-service-endpoint="unix://$CONTAINERD_SOCK" --runtime-request-timeout=5m \
    --hostname-override=localhost --root-dir="$KUBELET_ROOT" \
    --pod-infra-container-image="$PAUSE_IMAGE" --v=1

  wait_for "node localhost Ready" 120 node_ready
  wait_for "default service account" 60 kc -n default get serviceaccount default
  local n
  for n in etcd containerd registry kube-apiserver kube-controller-manager kube-scheduler kubelet; do
    alive_pid "$n" >/dev/null || die "$n is not running (see $LOGS/$n.log)"
  done
}

import_images() {
  {
    local c="ctr --address $CONTAINERD_SOCK"
    $c -n k8s.io images import "$IMAGES/pause.oci.tar"
    $c -n k8s.io images import "$IMAGES/busybox.oci.tar"
    # push the registry-only image through a scratch namespace, then drop it so that the
    # k8s.io namespace has to pull it from 127.0.0.1:5000
    wait_for registry 60 curl -fsS "http://$REGISTRY_ADDR/v2/"
    $c -n tandem-push images import --no-unpack "$IMAGES/busybox-registry.oci.tar"
    $c -n tandem-push images push --plain-http "$REGISTRY_IMAGE"
    $c -n tandem-push images rm --sync "$REGISTRY_IMAGE"
    $c namespaces rm tandem-push || true
  } >>"$LOGS/images.log" 2>&1
}

# ---------------------------------------------------------------- main
T0=$SECONDS
ensure_packages
build_binaries
[ "${1:-}" = build ] && exit 0
build_images
mkdir -p "$RUN" "$CONF" "$LOGS" "$PIDS"
make_pki
write_configs
T1=$SECONDS
start_all
log "cluster up: processes started and node Ready in $((SECONDS - T1)) s (script total $((SECONDS - T0)) s)"
log "export KUBECONFIG=$KUBECONFIG_ADMIN"
