"""Rule kinds, the RuleSet built from them, and loading: imports context, cstutil, suppress and walk only.

`load_rules`, `builtin_rules` and `RuleSet` are the names other tools ask for (titan-doctor
diagnose reads the env mapping through builtin_rules). Inside, from the bottom: words,
prefilter < ruleset < kind < kinds/ (one module per family of kinds; a family may split
into <family>_rules.py for its schemas and <family>.py for its pieces) < registry < load.
"""
from titan_doctor.migrate.rules.load import builtin_rules, load_rules
from titan_doctor.migrate.rules.ruleset import RuleSet

__all__ = ["RuleSet", "builtin_rules", "load_rules"]
