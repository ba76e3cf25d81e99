#!/usr/bin/env bash
# Launch examples/cuda_train_llama.py on one 8-GPU node (the migration demo input).
set -euo pipefail
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1,2,3,4,5,6,7}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-eth0}
export NCCL_BUFFSIZE=8388608
export NCCL_DEBUG=WARN
nvidia-smi --query-gpu=name,memory.total --format=csv
torchrun --standalone --nproc_per_node=8 "$(dirname "$0")/cuda_train_llama.py" --tp 2 "$@"
