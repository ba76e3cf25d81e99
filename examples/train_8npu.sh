#!/usr/bin/env bash
# Train on one Ascend server with 8 NPUs: check the host, then start 8 ranks.
#
#   bash examples/train_8npu.sh [CONFIG] [--set section.key=value ...]
#
# Each rank's output goes to <run folder>/logs/rank<N>.log (run folder: outputs/<config name>);
# rank 0's metrics lines are shown here. If a rank fails, a summary naming it, its error,
# every log and the `titan-doctor diagnose --log` command is printed first.
# Exit codes: 0 done, 1 a rank failed, 2 bad config, 124 a step hung (stack dumps in
# <run folder>/hang), 143 stopped by SIGTERM after saving (run this script again to resume).
set -euo pipefail

CONFIG=${1:-llama_7b}
shift || true

# CANN: compilers, runtime and HCCL libraries (default install prefix; change for a custom one).
ASCEND_TOOLKIT=${ASCEND_TOOLKIT:-/usr/local/Ascend/ascend-toolkit}
# shellcheck disable=SC1091
source "$ASCEND_TOOLKIT/set_env.sh"

export ASCEND_RT_VISIBLE_DEVICES=${ASCEND_RT_VISIBLE_DEVICES:-0,1,2,3,4,5,6,7}
# HCCL settings (ranges and defaults: rules/hccl_env.toml, from the CANN env var reference):
#   HCCL_CONNECT_TIMEOUT  s to wait for every rank at init; [120, 7200], default 120
#     https://www.hiascend.com/document/detail/zh/canncommercial/83RC1/maintenref/envvar/envref_07_0149.html
#   HCCL_EXEC_TIMEOUT     s a collective may wait for a slow peer; Atlas A2 default 1836
#     https://hiascend.com/document/detail/zh/canncommercial/800/apiref/envvar/envref_07_0078.html
#   HCCL_BUFFSIZE         MB per communicator buffer (each communicator takes 2x); default 200
#     https://hiascend.com/document/detail/zh/canncommercial/800/apiref/envvar/envref_07_0080.html
export HCCL_CONNECT_TIMEOUT=${HCCL_CONNECT_TIMEOUT:-600}
export HCCL_EXEC_TIMEOUT=${HCCL_EXEC_TIMEOUT:-1800}
export HCCL_BUFFSIZE=${HCCL_BUFFSIZE:-200}

# Stop before the job if the host is not ready: versions, CANN, devices, HCCL variables,
# then a live all_reduce over the 8 NPUs.
titan-doctor diagnose --nproc 8
titan-doctor diagnose --comm --nproc 8 --check comm

exec titan-train run --config "$CONFIG" --nproc 8 "$@"
