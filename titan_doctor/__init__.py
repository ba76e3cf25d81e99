"""titan_doctor: migrate CUDA training code to Ascend NPU and diagnose NPU jobs."""

__version__ = "0.1.0"
