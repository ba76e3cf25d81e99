"""One Python file through the codemod (pre-walk scans, the walk built from the rule kinds, import torch_npu); may import rules, walk, context and the leaves."""
