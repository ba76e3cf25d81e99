"""Rule kinds, the RuleSet built from them, and loading rules/migrate/*.toml."""
from titan_doctor.migrate.rules.load import RuleSet, builtin_rules, load_rules

__all__ = ["RuleSet", "builtin_rules", "load_rules"]
