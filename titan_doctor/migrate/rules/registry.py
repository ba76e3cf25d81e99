"""The one list of rule kinds: every family module of rules/kinds/, in walk order.

The order is the order of the pieces in a Python file's walk (after Positions and
ScopeTracker, walk/): visits run in this order, leaves in reverse, so a condition's group
(conditions) is open before anything inside it is rewritten and closed after, and the
capability marks (names, first piece) are made before Names leaves a call. It is also the
order of the line pieces (env names and values, then text rules) and of the derive steps
(names reads the implicit callees literals derives; kernel_gate reads the kernel report
rules names indexes).

    conditions    mixed_condition                        Conditions
    env           env                                    EnvVars; the line piece
    literals      literal_arg, compare, assign, ambiguous Literals
    methods       method                                 Methods
    names         rename, report, capability             Capabilities, Names
    strings       string                                 Strings
    text          text                                   the line piece
    files         file                                   (engine/: reported as a whole)
    add_import    add_import                             (after the walk: python/pyfile.py)
    kernel_gate   kernel_gate                            (python/gates.py; the pieces' check)

Adding a kind: a module in rules/kinds/ with its schema, checks, Kind (with VALID /
INVALID examples) and Family, and its line here.
"""

from __future__ import annotations

from titan_doctor.migrate.rules.kind import Family, Kind
from titan_doctor.migrate.rules.kinds import (
    add_import,
    conditions,
    env,
    files,
    kernel_gate,
    literals,
    methods,
    names,
    strings,
    text,
)

FAMILIES: tuple[Family, ...] = tuple(
    m.FAMILY for m in (conditions, env, literals, methods, names, strings, text, files, add_import, kernel_gate)
)

KINDS: dict[str, Kind] = {k.name: k for f in FAMILIES for k in f.kinds}
FAMILY_OF: dict[str, Family] = {k.name: f for f in FAMILIES for k in f.kinds}
FIELDS = {name: empty for f in FAMILIES for name, empty in f.fields.items()}
PYTHON_PIECES = tuple(f.python for f in FAMILIES if f.python is not None)
LINE_PIECES = tuple(f.lines for f in FAMILIES if f.lines is not None)
