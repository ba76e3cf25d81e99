"""Which files a run reads, the per-file dispatch, writes and git state; may import every layer below (notebook, python, text, rules, ...)."""
