"""Scripts and configs through the line rewriter (which files, the rule kinds' line pieces, re-parse); may import rules, context and the leaves."""
