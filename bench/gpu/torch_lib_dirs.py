#!/usr/bin/env python3
"""bench/gpu/torch_lib_dirs.py: where this python's torch keeps its shared libraries, ':'-separated: torch/lib and
the lib folders of the NVIDIA wheels beside it (CUDA runtime, cuBLAS, cuDNN, NCCL, ...). zhost and the test
binaries of gpu-bundle/ run against them (LD_LIBRARY_PATH), and the bundle leaves them out (bench/gpu/bundle.sh)."""
import glob
import os

import torch

torch_dir = os.path.dirname(torch.__file__)
nvidia = sorted(glob.glob(os.path.join(os.path.dirname(torch_dir), "nvidia", "*", "lib")))
print(":".join([os.path.join(torch_dir, "lib")] + nvidia))
