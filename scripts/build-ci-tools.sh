#!/usr/bin/env bash
# Build the workflow linter the test suite runs (tests/test_workflows.py): actionlint, from the Go module
# proxy alone, into $ASCEND_FLEET_CI_TOOLS (default /opt/ci-tools/bin), outside the repository. It runs
# shellcheck on every `run:` script of .github/workflows; shellcheck is a Debian package (.ci/run installs
# it). A binary that reports the pinned version is kept. Usage: scripts/build-ci-tools.sh
set -euo pipefail

DEST=${ASCEND_FLEET_CI_TOOLS:-/opt/ci-tools/bin}
ACTIONLINT_VERSION=v1.7.12

if [ -x "$DEST/actionlint" ] && [ "$("$DEST/actionlint" -version | head -n 1)" = "$ACTIONLINT_VERSION" ]; then
  echo "build-ci-tools: actionlint $ACTIONLINT_VERSION already built"
  exit 0
fi
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || { echo "build-ci-tools: no 'go' on PATH" >&2; exit 1; }
mkdir -p "$DEST"
start=$SECONDS
GOBIN=$DEST CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
echo "build-ci-tools: actionlint $ACTIONLINT_VERSION built in $((SECONDS - start)) s into $DEST"
