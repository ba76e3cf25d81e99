"""Small libcst helpers shared by the walk's pieces: dotted names and how to rebuild them
without losing the user's layout, and the text of string literals. A leaf: it imports
nothing of the migrate package."""

from __future__ import annotations

import libcst as cst


def full_name(node: cst.CSTNode) -> str:
    return cst.helpers.get_full_name_for_node(node) or ""


def dotted(node: cst.BaseExpression) -> list[str] | None:
    """['th', 'cuda', 'synchronize'] for a Name-rooted attribute chain, else None."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return parts[::-1]


def build_dotted(parts: list[str]) -> cst.BaseExpression:
    node: cst.BaseExpression = cst.Name(parts[0])
    for p in parts[1:]:
        node = cst.Attribute(value=node, attr=cst.Name(p))
    return node


def respell(node: cst.BaseExpression, parts: list[str]) -> cst.BaseExpression:
    """The chain with each name set to `parts` (same length), whitespace and comments kept."""
    if isinstance(node, cst.Attribute):
        attr = node.attr if node.attr.value == parts[-1] else node.attr.with_changes(value=parts[-1])
        return node.with_changes(value=respell(node.value, parts[:-1]), attr=attr)
    return node if node.value == parts[0] else node.with_changes(value=parts[0])


def string_value(node: cst.CSTNode) -> str | None:
    """The text of a plain string literal (no f-string, no bytes), else None."""
    if isinstance(node, cst.SimpleString):
        text = node.value
        if "\\" not in text and text[:1] in "'\"":  # no prefix, no escapes: the text itself
            quote = 3 if text[:3] in ('"""', "'''") and len(text) >= 6 else 1
            return text[quote:-quote]
        value = node.evaluated_value  # ast.literal_eval: a parse per string
        return value if isinstance(value, str) else None
    return None


def plain_text(node: cst.SimpleString) -> str | None:
    """The string's value when its source spells it as is (no escapes inside): only then may
    a rewrite replace the text between the quotes; else a person does it."""
    value = string_value(node)
    head = len(node.prefix) + len(node.quote)
    return value if value is not None and node.value[head : -len(node.quote)] == value else None


def with_text(node: cst.SimpleString, text: str) -> cst.SimpleString:
    """The same literal (prefix and quotes kept) holding `text`."""
    head = len(node.prefix) + len(node.quote)
    return node.with_changes(value=node.value[:head] + text + node.value[-len(node.quote) :])


def operand_name(node: cst.BaseExpression) -> str | None:
    """The name a compared value goes by: `x.device.type` -> "type", `device` -> "device",
    `dist.get_backend()` -> "get_backend()", `cfg["device"]` / `cfg.get("device")` /
    `getattr(args, "device")` -> "device"."""
    if isinstance(node, cst.Attribute):
        return node.attr.value
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        index = node.slice[0].slice
        if isinstance(index, cst.Index):
            return string_value(index.value)
        return None
    if isinstance(node, cst.Call):
        func = node.func
        keyed = (isinstance(func, cst.Attribute) and func.attr.value == "get" and node.args) or (
            isinstance(func, cst.Name) and func.value == "getattr" and len(node.args) >= 2
        )
        if keyed:
            key = string_value(node.args[0 if isinstance(func, cst.Attribute) else 1].value)
            if key is not None:
                return key
        inner = operand_name(func)
        return inner + "()" if inner else None
    return None
