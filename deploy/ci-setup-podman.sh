#!/usr/bin/env bash
# Install and configure rootful podman for the container tests (`pytest -m container`).
#
# Called by .ci/run on a clean Debian bookworm machine (root, no Docker engine, no image
# registry reachable). Idempotent: safe to run again.
#   - podman + runc: the container engine, run as root (no Docker engine here). The runtime is
#     pinned to runc, the one this setup installs and the tests ran with.
#   - iptables: netavark (podman's network backend) executes `iptables` to set up every network;
#     without it `podman run --network NAME` fails with "netavark: No such file or directory".
#   - debootstrap: builds the local Debian base image (deploy/build-base.sh), because no
#     registry is reachable to pull python:3.11-slim-bookworm.
#   - default_ulimits = []: podman's default sets RLIMIT_NOFILE for every container; on the CI
#     machine raising it is not permitted and every `podman run` fails with
#     "error setting rlimit type 7: operation not permitted".
set -euo pipefail

need=()
for cmd in podman runc iptables debootstrap /usr/lib/podman/netavark /usr/lib/podman/aardvark-dns; do
  command -v "$cmd" >/dev/null 2>&1 || need+=("$cmd")
done
if ((${#need[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # With recommends, as tested (buildah, catatonit, fuse-overlayfs, slirp4netns). netavark +
  # aardvark-dns give containers on one network DNS names (the code verifier finds `sandbox`).
  apt-get install -y -q podman runc iptables netavark aardvark-dns debootstrap ca-certificates
fi

conf=/etc/containers/containers.conf
marker="# cohort: container test settings v2"
if ! grep -qF "$marker" "$conf" 2>/dev/null; then
  mkdir -p /etc/containers
  if [[ -s "$conf" ]]; then cp "$conf" "$conf.cohort-backup"; fi
  cat >"$conf" <<CONF
$marker
[containers]
default_ulimits = []

[engine]
runtime = "runc"

[network]
network_backend = "netavark"
CONF
fi
podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.NetworkBackend}} podman {{.Version.Version}}'
