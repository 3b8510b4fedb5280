#!/usr/bin/env bash
# Build the local Debian bookworm base image used when no registry is reachable.
#
#   deploy/build-base.sh [IMAGE]        (default IMAGE: localhost/cohort-base:bookworm)
#
# Production builds use a public base instead (BASE_IMAGE=python:3.11-slim-bookworm); our
# Containerfiles work with both because they install python3 from apt when the base has none.
# Skips everything when IMAGE already exists (set COHORT_REBUILD_BASE=1 to force).
set -euo pipefail

image="${1:-localhost/cohort-base:bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if [[ "${COHORT_REBUILD_BASE:-0}" != 1 ]] && podman image exists "$image"; then
  echo "base image $image exists; skipping debootstrap"
  exit 0
fi

root="$(mktemp -d /var/tmp/cohort-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" "$mirror"

cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
# Keep apt lean in every image built FROM this base (same settings as the official slim images).
cat >"$root/etc/apt/apt.conf.d/90cohort" <<APT
APT::Install-Recommends "false";
APT::Install-Suggests "false";
APT
cat >"$root/etc/dpkg/dpkg.cfg.d/90cohort-nodoc" <<DPKG
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
DPKG
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
  "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*

tar -C "$root" --numeric-owner -c . | podman import \
  --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$image"
podman image inspect --format '{{.Id}} {{.Size}}' "$image"
