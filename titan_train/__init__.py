"""titan_train: a reference LLaMA trainer with FSDP2 + tensor parallel on npu/cuda/cpu."""
__version__ = "0.1.0"
