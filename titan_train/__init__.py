"""titan_train: a reference LLaMA trainer with FSDP2 + tensor + pipeline parallel on npu/cuda/cpu.

Layers, bottom to top (a module imports only from layers below its own, or from its own
subpackage; siblings on one layer do not know each other; tests/test_layering.py checks it,
docs/architecture.md draws it):

    runtime/                                    the process a rank runs in
    config/                                     what a job asks for
    models/  components/  data/  memory/        the model; loss, optim, metrics; tokens; the planner
    distributed/  checkpoint/                   parallelism applied; checkpoints and formats
    step.py < build.py < train.py < cli.py      one step, the parts, the loop, the commands
"""

__version__ = "0.1.0"
