#!/usr/bin/env bash
# Build the real-API-server lane's tools (tests/kube, `make test-kube`) from the Go module proxy alone:
#   etcd                        go.etcd.io/etcd/server/v3 (etcdmain), in a three-line wrapper main
#   kube-apiserver              k8s.io/kubernetes/cmd/kube-apiserver, in a wrapper module
#   pulumi-resource-kubernetes  github.com/pulumi/pulumi-kubernetes/provider/v4, in a wrapper module
# into $ASCEND_FLEET_K8S_TOOLS (default /opt/k8s/bin), outside the repository. A tool whose stamp says
# it was built at the pinned version is kept. Usage: scripts/build-k8s-tools.sh [etcd|kube-apiserver|provider]...
# Each build's seconds go to $DEST/versions.txt; docs/testing.md ("Kubernetes lane") has the timings.
set -euo pipefail

DEST=${ASCEND_FLEET_K8S_TOOLS:-/opt/k8s/bin}
# k8s.io/kubernetes v1.37.2 is the newest release the proxy serves; its hack/lib/etcd.sh tests against
# etcd 3.7.0, so etcd is the newest 3.7 patch.
KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.7.3
# The proxy serves the provider only as this pseudo-version (a commit of 2026-01-15, between releases);
# PROVIDER_VERSION is what the plugin reports and must equal the pinned Python SDK (pulumi-kubernetes 4.25.0),
# which also supplies the sdk/v4 module that the provider's go.mod takes from `../sdk`.
PROVIDER_MODULE=github.com/pulumi/pulumi-kubernetes/provider/v4
PROVIDER_PSEUDO=v4.0.0-20260115033456-f47bc2d6f199
PROVIDER_VERSION=4.25.0

command -v go >/dev/null || { echo "build-k8s-tools: no 'go' on PATH" >&2; exit 1; }
mkdir -p "$DEST"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

stamp_ok() { [ -x "$DEST/$1" ] && [ "$(cat "$DEST/.$1.version" 2>/dev/null)" = "$2" ]; }

record() {  # tool version seconds
  echo "$2" >"$DEST/.$1.version"
  grep -v "^$1 " "$DEST/versions.txt" 2>/dev/null >"$WORK/versions" || true
  echo "$1 $2 built_in_seconds=$3 go=$(go env GOVERSION) on=$(date -u +%F)" >>"$WORK/versions"
  sort "$WORK/versions" >"$DEST/versions.txt"
  echo "build-k8s-tools: $1 $2 built in $3 s"
}

build_etcd() {
  stamp_ok etcd "$ETCD_VERSION" && { echo "build-k8s-tools: etcd $ETCD_VERSION already built"; return; }
  local dir=$WORK/etcd start=$SECONDS
  mkdir -p "$dir" && cd "$dir"
  # The etcd binary's main (go.etcd.io/etcd/v3, the repository root) is served only up to v3.6.8;
  # server/v3's etcdmain.Main is that main's whole body.
  printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' >main.go
  go mod init ascend-fleet/etcd >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null
  go mod tidy >/dev/null
  go build -trimpath -ldflags "-s -w" -o "$DEST/etcd" .
  record etcd "$ETCD_VERSION" $((SECONDS - start))
}

build_kube_apiserver() {
  stamp_ok kube-apiserver "$KUBE_VERSION" && { echo "build-k8s-tools: kube-apiserver $KUBE_VERSION already built"; return; }
  local dir=$WORK/kube start=$SECONDS gomod staging=v0.${KUBE_VERSION#v1.} mod
  mkdir -p "$dir" && cd "$dir"
  go mod init ascend-fleet/kube-apiserver >/dev/null 2>&1
  # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with ./staging paths, which
  # count only in its own repository: require and replace each at the matching published v0.X.Y instead.
  # (Only the required ones: sample-cli-plugin and sample-controller are replaced but never required,
  # and the proxy has no v0.37.2 of them.)
  gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  {
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    for mod in $(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) v0\.0\.0$#\1#p' "$gomod"); do
      echo "require $mod $staging"
      echo "replace $mod => $mod $staging"
    done
  } >>go.mod
  go get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBE_VERSION" >/dev/null
  local v=k8s.io/component-base/version minor=${KUBE_VERSION#v1.}
  go build -trimpath -o "$DEST/kube-apiserver" -ldflags "-s -w -X $v.gitVersion=$KUBE_VERSION \
    -X $v.gitMajor=1 -X $v.gitMinor=${minor%%.*} -X $v.gitTreeState=clean" k8s.io/kubernetes/cmd/kube-apiserver
  record kube-apiserver "$KUBE_VERSION" $((SECONDS - start))
}

build_provider() {
  stamp_ok pulumi-resource-kubernetes "$PROVIDER_VERSION" && {
    echo "build-k8s-tools: pulumi-resource-kubernetes $PROVIDER_VERSION already built"; return; }
  local dir=$WORK/provider start=$SECONDS src
  mkdir -p "$dir"
  src=$(go mod download -json "$PROVIDER_MODULE@$PROVIDER_PSEUDO" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  # The module zip lacks the schema-embed.json and terraform-mapping-embed.json that main.go embeds:
  # build the command in a wrapper and run its own generate.go there first.
  cp "$src"/cmd/pulumi-resource-kubernetes/* "$dir/" && chmod -R u+w "$dir" && cd "$dir"
  go mod init ascend-fleet/pulumi-resource-kubernetes >/dev/null 2>&1
  cat >>go.mod <<EOF
require $PROVIDER_MODULE $PROVIDER_PSEUDO
require github.com/pulumi/pulumi-kubernetes/sdk/v4 v$PROVIDER_VERSION
replace github.com/pulumi/pulumi-kubernetes/sdk/v4 => github.com/pulumi/pulumi-kubernetes/sdk/v4 v$PROVIDER_VERSION
EOF
  go mod tidy >/dev/null
  VERSION=$PROVIDER_VERSION go run generate.go
  go build -trimpath -o "$DEST/pulumi-resource-kubernetes" \
    -ldflags "-s -w -X $PROVIDER_MODULE/pkg/version.Version=$PROVIDER_VERSION" .
  record pulumi-resource-kubernetes "$PROVIDER_VERSION" $((SECONDS - start))
}

for tool in "${@:-etcd kube-apiserver provider}"; do
  for t in $tool; do
    case $t in
      etcd) build_etcd ;;
      kube-apiserver) build_kube_apiserver ;;
      provider) build_provider ;;
      *) echo "build-k8s-tools: unknown tool '$t' (etcd, kube-apiserver, provider)" >&2; exit 2 ;;
    esac
  done
done
