"""Rule kinds, the RuleSet built from them, and loading; may import walk, context and the leaves."""

# the names other tools ask for (titan-doctor diagnose reads the env mapping through builtin_rules)
from titan_doctor.migrate.rules.load import builtin_rules, load_rules
from titan_doctor.migrate.rules.ruleset import RuleSet

__all__ = ["RuleSet", "builtin_rules", "load_rules"]
