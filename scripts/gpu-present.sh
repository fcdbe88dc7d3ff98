#!/usr/bin/env bash
# Exit status 0 when this machine has an NVIDIA GPU with its driver (the device node, or
# nvidia-smi listing a GPU), 1 otherwise. Before anything is built, scripts/demo.sh and
# scripts/setup.sh --demo ask it whether the CUDA kernels are worth compiling.
[ -e /dev/nvidiactl ] && exit 0
command -v nvidia-smi >/dev/null 2>&1 || exit 1
[[ "$(nvidia-smi -L 2>/dev/null)" == *"GPU "* ]]
