# The two quickstart targets. Each sets up ./.venv first (idempotent, fast when done).
.PHONY: setup train test test-fast

setup:
	@bash scripts/setup.sh

# The main job on its built-in default: the debug LLaMA, 2 ranks FSDP, offline data.
train: setup
	.venv/bin/titan-train run --config configs/llama_debug.toml --nproc 2

# The whole suite, as CI runs it, on two pytest-xdist workers. A trainer run keeps about one
# core busy of two (start-up, gloo waits), so two test files at a time fill the machine; each
# file stays on one worker (--dist loadfile: its module fixtures are made once), and runs shared
# across files are made once per session (tests/train/conftest.py's SharedRuns).
test: setup
	.venv/bin/python -m pytest -q -n 2 --dist loadfile tests

# Everything but the tests that start trainer ranks or distributed workers (marked `multirank`):
# minutes on 2 cores, for a change to a migrate rule or the doctor. TITAN_TEST_NO_RANKS=1 makes
# a process start that slipped past the marker fail its test (tests/conftest.py). Two pytest-xdist
# workers, one per core: these tests share nothing but the CPU.
test-fast: setup
	TITAN_TEST_NO_RANKS=1 .venv/bin/python -m pytest -q -n 2 -m "not multirank" tests
