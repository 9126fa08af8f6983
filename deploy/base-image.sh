#!/bin/sh
# Make the base image deploy/Dockerfile starts FROM (python:<version>-slim-bookworm) out of
# Debian's own packages, for a machine that reaches no image registry: debootstrap a minimal
# bookworm with Debian's python3, then `podman import` it under the FROM name, so that
# `podman build --pull=never -f deploy/Dockerfile .` builds the Dockerfile unchanged.
#
#   deploy/base-image.sh [IMAGE]
#
# IMAGE defaults to docker.io/library/python:<ARG PYTHON_VERSION>-slim-<suite>, read from
# deploy/Dockerfile. An image already there is kept (one debootstrap per machine). The
# Debian mirror is the first one apt uses here (/etc/apt/sources.list*), or $DEBIAN_MIRROR.
# Needs root, debootstrap and podman. Differences from the official image: Debian's Python
# (3.11.2, under /usr rather than /usr/local), with python3-dev.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
version=$(sed -n 's/^ARG PYTHON_VERSION=//p' "$here/Dockerfile")
suite=$(sed -n 's/^FROM python:\${PYTHON_VERSION}-slim-\([a-z]*\).*/\1/p' "$here/Dockerfile" | head -n 1)
image=${1:-docker.io/library/python:$version-slim-$suite}

if podman image exists "$image"; then
    echo "base-image: $image is already there"
    exit 0
fi

# the first non-security mirror apt uses: deb822 "URIs:" lines or one-line "deb URI suite"
mirror=${DEBIAN_MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
    /etc/apt/sources.list.d/*.list 2>/dev/null \
    | sed -n -e 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' -e 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]*\)\{0,1\}\([^[:space:]]*\).*/\2/p' \
    | grep -v security | head -n 1)}
mirror=${mirror:-http://deb.debian.org/debian}

rootfs=$(mktemp -d /var/tmp/nsqmp-base.XXXXXX)
trap 'rm -rf "$rootfs" "$rootfs.log"' EXIT
trap 'exit 1' INT TERM
echo "base-image: debootstrap $suite from $mirror into $rootfs"
debootstrap --variant=minbase \
    --include=python3,python3-pip,python3-venv,python-is-python3,python3-dev,ca-certificates \
    "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || { tail -n 20 "$rootfs.log"; exit 1; }
# the official python image has no PEP 668 marker: pip installs into the system Python
rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
# apt inside the build (the builder stage installs gcc) uses the same mirrors as this host
cp /etc/apt/sources.list "$rootfs/etc/apt/" 2>/dev/null || :
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
    if [ -f "$f" ]; then cp "$f" "$rootfs/etc/apt/sources.list.d/"; fi
done
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
tar -C "$rootfs" -c . | podman import --quiet \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' - "$image" >/dev/null
echo "base-image: $image made"
