# scripts/lib/env.sh: sourced by scripts/setup-deps, build, test, run-main and gpu-check; the one place that
# names where zhost's Python environment lives and where the CUDA toolkit is.
#
# ZHOST_VENV: the project's virtual environment, holding the pinned PyPI packages of
# scripts/python-requirements.txt (torch, whose wheel is the LibTorch zhost builds against, and numpy, which the
# tests' PyTorch references use). It lives outside the checkout so that clones on the same machine (CI's)
# share its 5 GB; scripts/setup-deps creates it and keeps it at the pinned versions.
ZHOST_VENV=${ZHOST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/zhost/venv}
export ZHOST_VENV
# nvcc compiles the CUDA code (ZHOST_WITH_CUDA) here too, where nothing can run it.
if [[ -x /usr/local/cuda/bin/nvcc && ":$PATH:" != *":/usr/local/cuda/bin:"* ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
