# Sourced by bench/gpu_check.sh and bench/gpu_accept.sh (from the repository root): the import root that runs the
# checkout as `cohort` without installing it, the offline wheels from bench/wheels/ for what the GPU machine lacks,
# and PY. Set TESTS=1 first to also need the project's runtime dependencies and pytest (its servers, the CLI).
# `--fetch-wheels` as the first argument of either script fills bench/wheels/ on a machine with PyPI access.
WHEELS=bench/wheels
NEEDED=(pydantic pyyaml jaxtyping)
# --tests: the project's runtime dependencies too (verifier servers, the CLI, pytest), all from bench/wheels/
TEST_NEEDED=(pytest typer rich grpcio grpcio-health-checking grpcio-reflection "protobuf>=7.35.1" sympy
             latex2sympy2_extended prometheus-client pyseccomp jsonschema cachetools)
TESTS=${TESTS:-0}
PY=${PYTHON:-python3}

if [ "${1:-}" = "--fetch-wheels" ]; then  # on a networked machine: wheels for the GPU machine's Python 3.12
  mkdir -p "$WHEELS"
  "$PY" -m pip download -q --only-binary=:all: --python-version "${GPU_PY_VERSION:-3.12}" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d "$WHEELS" "${NEEDED[@]}" "${TEST_NEEDED[@]}"
  ls "$WHEELS"
  exit 0
fi

missing=()
"$PY" -c "import pydantic" 2>/dev/null || missing+=(pydantic)
"$PY" -c "import yaml" 2>/dev/null || missing+=(pyyaml)
"$PY" -c "import jaxtyping" 2>/dev/null || missing+=(jaxtyping)
SITE=$(mktemp -d)  # the import root: cohort -> this checkout (the package's folder is the repository root)
trap 'rm -rf "$SITE"' EXIT
ln -s "$PWD" "$SITE/cohort"
if [ $TESTS = 1 ] && ! "$PY" -c "import pytest, typer, grpc_health, grpc_reflection, sympy, jsonschema, cachetools" 2>/dev/null; then
  missing+=("the project's runtime dependencies and pytest")
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ ! -d "$WHEELS" ]; then
    echo "error: missing ${missing[*]} and no $WHEELS/ folder (run bench/gpu_check.sh --fetch-wheels where PyPI is reachable)" >&2
    exit 1
  fi
  # beside the machine's own packages (its torch/transformers stay), offline; a venv would not see them when
  # the machine's python3 is itself a venv's
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

"$PY" -c "import torch, transformers" || { echo "error: $PY cannot import torch and transformers (the GPU machine has them)" >&2; exit 1; }
"$PY" -c "import torch, transformers; print(f'torch {torch.__version__}, transformers {transformers.__version__}, cuda {torch.cuda.is_available()}')"
