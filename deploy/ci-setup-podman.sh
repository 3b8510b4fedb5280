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
#
# The three settings go to the system-wide /etc/containers/containers.conf, replacing it (a file that
# was there is kept as containers.conf.cohort-backup). The script says so when it does; run from a
# terminal over an existing file it asks first. COHORT_CONTAINERS_CONF=keep leaves the file alone
# and prints the settings instead (docs/deploy.md: when you need which).
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
settings="$(cat <<CONF
$marker
[containers]
default_ulimits = []

[engine]
runtime = "runc"

[network]
network_backend = "netavark"
CONF
)"
if ! grep -qF "$marker" "$conf" 2>/dev/null; then
  write=yes
  if [[ "${COHORT_CONTAINERS_CONF:-}" == keep ]]; then
    write=no
  elif [[ -s "$conf" && -t 0 && -t 2 ]]; then  # a person at a terminal (not a test capturing its output)
    read -r -p "ci-setup-podman.sh: replace $conf (kept as $conf.cohort-backup) with Cohort's test settings? [y/N] " answer
    [[ "$answer" == [yY]* ]] || write=no
  fi
  if [[ "$write" == yes ]]; then
    note=""
    if [[ -s "$conf" ]]; then cp "$conf" "$conf.cohort-backup"; note="; the previous file is $conf.cohort-backup"; fi
    mkdir -p "$(dirname "$conf")"
    printf '%s\n' "$settings" >"$conf"
    echo "ci-setup-podman.sh: wrote $conf (runtime runc, netavark, no default ulimits)$note" >&2
  else
    printf 'ci-setup-podman.sh: left %s alone; the settings the tests ran with:\n%s\n' "$conf" "$settings" >&2
  fi
fi
podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.NetworkBackend}} podman {{.Version.Version}}'
