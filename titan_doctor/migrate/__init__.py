"""titan-doctor migrate: the CUDA -> Ascend NPU codemod, in layers.

Bottom to top; a module imports only from a lower layer or from its own unit (a
subpackage or a top-level module), and two units on one layer do not import each other.
Imports inside functions count too (command.py defers its imports, downwards only, so
`titan-doctor --help` does not load libcst).

    1  cstutil, suppress, npu_api   leaves: libcst helpers; `# titan-doctor: ignore`
                                    comments; the torch_npu wheel reader that writes
                                    rules/migrate/npu_api.toml (a tool, run by hand)
    2  context                      what one rewrite's pieces share: Context (a Python
                                    walk), LineContext (a script line)
    3  walk/                        the rule-free libcst walk: Migrator (dispatch),
                                    Positions, Scopes / ScopeTracker, stdlib-ast names
    4  rules/                       rule kinds and loading; inside, bottom to top:
                                    words, prefilter < ruleset < kind < kinds/ (one
                                    module per family of kinds: schema, checks,
                                    examples, RuleSet fields, derive, pieces) <
                                    registry (the one list, in walk order) <
                                    portable (--target portable: its table laid
                                    over the npu rules) < load
    5  python/, text/               one Python file (statement skipping, the pre-walk
                                    scans: kernel gates, device flows, backends (code
                                    already running beyond CUDA), setup.py requirements,
                                    the tree's facts; the walk from the registry; import
                                    torch_npu); one script or config, line by line.
                                    Siblings: neither imports the other
    6  notebook/                    .ipynb: code cells through python/, shell lines
                                    through text/
    7  engine/                      file kinds, discovery (git ignores), the runner (the
                                    tree's facts first, then each file in its workers),
                                    writes, git state
    8  command                      the click command

Adding a rule kind: a module in rules/kinds/ and its line in rules/registry.py.
"""
