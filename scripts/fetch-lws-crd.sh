#!/usr/bin/env bash
# Fetch LeaderWorkerSet's CustomResourceDefinition (the schema of leaderworkerset.x-k8s.io/v1, which the Kubernetes
# target renders a multi-host service as) from the Go module proxy alone: the module sigs.k8s.io/lws carries it as
# config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml. Copied into $ASCEND_FLEET_LWS_CACHE (default
# ~/.cache/ascend-fleet/lws), outside the repository; a copy already fetched at the pinned version is kept. Prints
# the file's path. Used by tests/support/lws.py (the offline schema test) and tests/kube (which installs it).
set -euo pipefail

# The newest version the proxy serves (v0.10.0's zip is refused).
LWS_VERSION=v0.9.0
CRD=config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml
DEST=${ASCEND_FLEET_LWS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ascend-fleet/lws}/$LWS_VERSION
OUT=$DEST/${CRD##*/}

if [ -s "$OUT" ]; then
  echo "$OUT"
  exit 0
fi
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || { echo "fetch-lws-crd: no 'go' on PATH" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# Outside any module: `go mod download` then fetches just this module (checked against the checksum database).
cd "$WORK"
if ! go mod download -json "sigs.k8s.io/lws@$LWS_VERSION" >download.json 2>download.err; then
  echo "fetch-lws-crd: go mod download sigs.k8s.io/lws@$LWS_VERSION failed:" >&2
  cat download.err download.json >&2
  exit 1
fi
DIR=$(sed -n 's/.*"Dir": "\(.*\)",/\1/p' download.json)
[ -s "$DIR/$CRD" ] || { echo "fetch-lws-crd: sigs.k8s.io/lws@$LWS_VERSION has no $CRD" >&2; exit 1; }
mkdir -p "$DEST"
cp "$DIR/$CRD" "$WORK/crd.yaml"
chmod 0644 "$WORK/crd.yaml"
mv "$WORK/crd.yaml" "$OUT"
echo "$OUT"
