# The two quickstart targets. Each sets up ./.venv first (idempotent, fast when done).
.PHONY: setup train test

setup:
	@bash scripts/setup.sh

# The main job on its built-in default: the debug LLaMA, 2 ranks FSDP, offline data.
train: setup
	.venv/bin/titan-train run --config configs/llama_debug.toml --nproc 2

test: setup
	.venv/bin/python -m pytest -q tests
