#!/usr/bin/env bash
# Builds the upstream Go tools the dev cluster runs (etcd, kube-apiserver,
# kube-controller-manager, kwok, kube-scheduler, kubelet, kube-proxy, kubectl, coredns, helm) from the modules pinned under hack/tools/<group>/go.mod,
# and the dev cluster's own small Go programs (sunk-netpol, from dev/netpol) that reuse Go libraries.
#
# Each binary lands in $SUNK_CACHE/bin (default ~/.cache/sunk/bin) under a name keyed by a
# hash of its go.mod and go.sum, so a changed pin rebuilds and an unchanged one is reused.
# A stable symlink (bin/<tool>) points at the current build. Nothing is written to the
# checkout. A program of our own (its module-dir has a slash: a path from the repository root)
# is keyed by its Go sources too. Usage: hack/build-tools.sh [tool...]   (default: all)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=${SUNK_CACHE:-$HOME/.cache/sunk}/bin
mkdir -p "$bin"
# One build at a time: `make test` runs its kwok and real-Node suites side by side, and both
# may find a tool missing on a cold machine.
exec 9>"$bin/.build.lock"
flock 9

if ! command -v go >/dev/null 2>&1; then
  echo "Go is not installed: install Go 1.24 or newer (https://go.dev/doc/install) and run this again." >&2
  exit 1
fi

# tool  module-dir  package
catalog=(
  "etcd           etcd        go.etcd.io/etcd/server/v3"
  "kube-apiserver kubernetes  k8s.io/kubernetes/cmd/kube-apiserver"
  "kwok           kwok        sigs.k8s.io/kwok/cmd/kwok"
  "kube-controller-manager kubernetes k8s.io/kubernetes/cmd/kube-controller-manager"
  "kube-scheduler kubernetes  k8s.io/kubernetes/cmd/kube-scheduler"
  "kubelet        kubernetes  k8s.io/kubernetes/cmd/kubelet"
  "kube-proxy     kubernetes  k8s.io/kubernetes/cmd/kube-proxy"
  "kubectl        kubernetes  k8s.io/kubernetes/cmd/kubectl"
  "coredns        coredns     github.com/coredns/coredns"
  "helm           helm        helm.sh/helm/v3/cmd/helm"
  "sunk-netpol    dev/netpol  sunk.local/dev/netpol"
)

# Kubernetes binaries report their version from link-time variables; without them the API
# server says v0.0.0-master and clients misjudge it.
version_ldflags() {
  [ "$1" = kubernetes ] || return 0
  local v; v=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/tools/kubernetes/go.mod")
  local minor; minor=$(echo "$v" | cut -d. -f2)
  local p=k8s.io/component-base/version
  echo "-X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
}

wanted=("$@")
for row in "${catalog[@]}"; do
  read -r tool dir pkg <<<"$row"
  if ((${#wanted[@]})) && [[ " ${wanted[*]} " != *" $tool "* ]]; then continue; fi
  moddir=$here/tools/$dir sources=()
  if [[ $dir == */* ]]; then
    moddir=$here/../$dir
    sources=("$moddir"/*.go)
  fi
  key=$(cat "$moddir/go.mod" "$moddir/go.sum" "${sources[@]}" | sha256sum | cut -c1-12)
  out="$bin/$tool-$key"
  if [ ! -x "$out" ]; then
    echo "building $tool from $pkg (once per pinned version; minutes on a cold machine)" >&2
    start=$SECONDS
    ldflags="-s -w $(version_ldflags "$dir")"
    (cd "$moddir" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags="$ldflags" -o "$out.partial" "$pkg")
    mv "$out.partial" "$out"
    echo "built $tool in $((SECONDS - start)) s" >&2
  fi
  ln -sfn "$out" "$bin/$tool"
done
