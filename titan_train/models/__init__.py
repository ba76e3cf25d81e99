"""The LLaMA model (no parallelism in it), the fused-kernel seam, and sharded weight init. May import config and runtime."""
