#!/usr/bin/env bash
# Installs what the Kubernetes tests and benchmark need (Debian 12, root): etcd (Debian's etcd-server) and a real
# control plane, kube-apiserver / kube-controller-manager / kube-scheduler v1.20.2, built offline from Debian's
# own source package (no registry ships these binaries; kind/k3s/minikube need Docker or downloads). The build
# takes 4-8 minutes on 2 cores and is cached in $K8S_BIN (default /opt/nni-k8s/bin): it runs only when a binary is
# missing, and its ~2 GB build tree is deleted afterwards. Nothing is started here: the tests start a private
# control plane plus nnix's fake kubelet (nnix.testing.kube.KubeLab) and stop it.
set -euo pipefail
OUT=${K8S_BIN:-/opt/nni-k8s/bin}; WORK=${K8S_BUILD:-/tmp/nnix-k8s-build}
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
  echo "k8s.sh: needs root and apt-get (Debian 12); the Kubernetes tests will skip loudly without a control plane" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
command -v etcd >/dev/null || { apt-get update -qq; apt-get install -y -qq --no-install-recommends etcd-server >/dev/null; }
if [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/kube-controller-manager" ] && [ -x "$OUT/kube-scheduler" ]; then
  echo "k8s.sh: $("$OUT/kube-apiserver" --version) cached in $OUT"; exit 0
fi
start=$(date +%s)
if ! apt-cache showsrc kubernetes 2>/dev/null | grep -q '^Package: kubernetes'; then
  # source packages from the mirror apt already uses
  sed -e 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > /etc/apt/sources.list.d/nnix-debsrc.sources
  apt-get update -qq
fi
apt-get install -y -qq --no-install-recommends golang-go rsync dpkg-dev golang-github-modern-go-reflect2-dev >/dev/null
mkdir -p "$WORK" "$OUT"; cd "$WORK"
[ -d kubernetes-1.20.5+really1.20.2 ] || apt-get source -qq kubernetes 2>/dev/null
cd kubernetes-1.20.5+really1.20.2
# 1.20 vendors reflect2 v1.0.1, which crashes under Go >= 1.18 on the first custom-resource write: use Debian's 1.0.2
R=vendor/github.com/modern-go/reflect2
[ -f $R/go_above_118.go ] || { rm -f $R/*.go $R/*.s; cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go /usr/share/gocode/src/github.com/modern-go/reflect2/*.s $R/; }
if ! GOPROXY=off CGO_ENABLED=0 HOME="$WORK/home" \
    make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler" >"$WORK/make.log" 2>&1; then
  tail -30 "$WORK/make.log"
  echo "!!! k8s.sh: THE KUBERNETES BUILD FAILED (log above): the Kubernetes tests will skip, loudly !!!" >&2
  exit 0
fi
install -m 755 _output/bin/kube-apiserver _output/bin/kube-controller-manager _output/bin/kube-scheduler "$OUT/"
cd / && rm -rf "$WORK"
echo "k8s.sh: built $("$OUT/kube-apiserver" --version) in $(( $(date +%s) - start )) s into $OUT"
