#!/usr/bin/env bash
# Launch examples/cuda_train_llama.py on one 8-GPU node (the migration demo input).
set -euo pipefail
export ASCEND_RT_VISIBLE_DEVICES=${ASCEND_RT_VISIBLE_DEVICES:-0,1,2,3,4,5,6,7}
export HCCL_SOCKET_IFNAME=${HCCL_SOCKET_IFNAME:-eth0}
export HCCL_BUFFSIZE=8
export ASCEND_GLOBAL_LOG_LEVEL=2
nvidia-smi --query-gpu=name,memory.total --format=csv
torchrun --standalone --nproc_per_node=8 "$(dirname "$0")/cuda_train_llama.py" --tp 2 "$@"
