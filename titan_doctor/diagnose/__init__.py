"""`titan-doctor diagnose`: environment checks for Ascend (and CUDA/CPU) training hosts.

One module per family, each check a function from inputs to findings (no printing):
versions (python/torch/torch_npu, matrix), ascend (CANN, driver), devices, distributed_env,
comm (live collective test), logs (crash-log explainer), checkpoint (format doctor). registry
lists them in display order, runner executes them, command is the click entry point. torch
is only ever imported in subprocesses (_probe_script.py, _comm_worker.py), except by the
checkpoint check with --config, which builds the trainer's model on the meta device.
"""
