"""The memory planner's engine: the analytic per-rank estimate and the remedies ranked by what they save. Torch-free; may import config and runtime."""
