#!/usr/bin/env bash
# Build the Cohort images from a clean, minimal build context.
#
#   deploy/build.sh [TARGET...]          TARGET: verifier sandbox trainer (default: verifier sandbox)
#
# Environment:
#   ENGINE        podman (default) or docker
#   BASE_IMAGE    base image; "local" builds/uses the offline Debian base (deploy/build-base.sh).
#                 Default: the Containerfile's python:3.11-slim-bookworm.
#   IMAGE_PREFIX  image name prefix (default localhost/cohort-), images are ${IMAGE_PREFIX}TARGET:TAG
#   TAG           image tag (default dev)
#   PIP_CA        CA bundle passed to pip as the build secret `pip_ca` (default: $PIP_CERT if set),
#                 for build networks that intercept TLS
#   COHORT_TORCH_WHEEL  a torch wheel for the trainer image (default: one found in deploy/wheels or
#                 pip's find-links, e.g. /opt/wheels); without one the build downloads torch.
#
# The context holds only what the images need (pyproject, sources, protos, locks), never the
# virtualenv or caches, so it is a few hundred kilobytes (plus the torch wheel for `trainer`).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
engine="${ENGINE:-podman}"
prefix="${IMAGE_PREFIX:-localhost/cohort-}"
tag="${TAG:-dev}"
targets=("$@")
((${#targets[@]})) || targets=(verifier sandbox)

base_args=()
if [[ "${BASE_IMAGE:-}" == local ]]; then
  "$repo/deploy/build-base.sh"
  base_args=(--build-arg "BASE_IMAGE=localhost/cohort-base:bookworm")
elif [[ -n "${BASE_IMAGE:-}" ]]; then
  base_args=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
fi

ctx="$(mktemp -d /var/tmp/cohort-context.XXXXXX)"
trap 'rm -rf "$ctx"' EXIT
tar -C "$repo" --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' -c \
  pyproject.toml __init__.py protogen.py proto cli rpc conformance integrations verifiers sandbox tools trainer \
  deploy/Containerfile deploy/locks deploy/healthcheck.py deploy/wheels/README.md | tar -C "$ctx" -x
# pyproject's `readme`; the package metadata needs the file, not the whole README history.
if [[ -f "$repo/README.md" ]]; then cp "$repo/README.md" "$ctx/"; else echo "# cohort-rl" >"$ctx/README.md"; fi

for target in "${targets[@]}"; do
  if [[ "$target" == trainer ]]; then
    wheel="${COHORT_TORCH_WHEEL:-}"
    if [[ -z "$wheel" ]]; then
      wheel="$(ls "$repo"/deploy/wheels/torch-*.whl /opt/wheels/torch-*.whl 2>/dev/null | head -n1 || true)"
    fi
    if [[ -n "$wheel" ]]; then
      ln "$wheel" "$ctx/deploy/wheels/" 2>/dev/null || cp "$wheel" "$ctx/deploy/wheels/"
    fi
  fi
done

secret_args=()
ca="${PIP_CA:-${PIP_CERT:-}}"
if [[ -n "$ca" && -s "$ca" ]]; then
  secret_args=(--secret "id=pip_ca,src=$ca")
fi
format_args=()
[[ "$engine" == podman ]] && format_args=(--format docker)   # keep HEALTHCHECK (OCI format drops it)

for target in "${targets[@]}"; do
  case "$target" in verifier|sandbox|trainer) ;; *) echo "unknown target: $target" >&2; exit 2 ;; esac
  image="${prefix}${target}:${tag}"
  start=$(date +%s%N)
  "$engine" build "${format_args[@]}" --network=host "${base_args[@]}" "${secret_args[@]}" \
    --target "$target" -t "$image" -f "$ctx/deploy/Containerfile" "$ctx"
  end=$(date +%s%N)
  echo "built $image in $(((end - start) / 1000000)) ms"
done
