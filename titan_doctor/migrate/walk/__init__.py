"""The rule-free libcst walk (dispatch to pieces, positions, import bindings); may import context and cstutil only."""
