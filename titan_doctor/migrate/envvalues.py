"""Where titan-doctor diagnose (distributed_env.py) reads the env-value conversion; the code
is titan_doctor/migrate/rules/kinds/env_values.py, with the env rule kind it serves."""
from titan_doctor.migrate.rules.kinds.env_values import EnvChange, convert_env, convert_to

__all__ = ["EnvChange", "convert_env", "convert_to"]
