"""Name resolution edge cases (scopes.py) and the statement skipping (skipping.py): the
fast path must give exactly what a full walk gives."""

from __future__ import annotations

import pytest

from titan_doctor.migrate.engine import runner as engine
from titan_doctor.migrate.python import pyfile
from titan_doctor.migrate.python.facts import Place

from .helpers import fixture_inputs, rules


def migrate(src: str) -> str:
    return engine.migrate_python(src.encode(), rules(), "t.py", place=Place(torch_npu_import="always"))[0].decode()


@pytest.mark.parametrize(
    "src, expected",
    [
        # a comprehension variable shadows the module only inside the comprehension
        (
            "import torch\nxs = [torch.cuda.x() for torch in objs]\ntorch.cuda.synchronize()\n",
            "import torch\nimport torch_npu\nxs = [torch.cuda.x() for torch in objs]\ntorch.npu.synchronize()\n",
        ),
        # lambda parameters shadow too
        ("import torch\nf = lambda torch: torch.cuda.synchronize()\n", None),
        # `global` makes the function see the module binding
        (
            "import torch\ndef f():\n    global torch\n    torch.cuda.synchronize()\n",
            "import torch\nimport torch_npu\ndef f():\n    global torch\n    torch.npu.synchronize()\n",
        ),
        # an except-as / with-as / for target named like the module shadows it
        ("import torch\ndef f(ctx):\n    with ctx as torch:\n        torch.cuda.synchronize()\n", None),
        # try/except import fallback keeps the import meaning
        (
            "try:\n    import torch\nexcept ImportError:\n    torch = None\n\ntorch.cuda.synchronize()\n",
            "import torch_npu\ntry:\n    import torch\nexcept ImportError:\n    torch = None\n\n"
            "torch.npu.synchronize()\n",
        ),
        # a local module-level name that is not an import: untouched
        ("class cuda:\n    pass\ncuda.synchronize()\n", None),
        # names in non-reference positions keep their spelling; the references change
        (
            "from torch import cuda\nf(cuda=1)\ndef g(cuda=None):\n    return cuda\ncuda.synchronize()\n",
            "import torch_npu\nfrom torch import npu\nf(cuda=1)\ndef g(cuda=None):\n    return cuda\n"
            "npu.synchronize()\n",
        ),
    ],
)
def test_scoping(src, expected):
    assert migrate(src) == (src if expected is None else expected)


def test_existing_guarded_torch_npu_import_is_not_duplicated():
    src = "import torch\ntry:\n    import torch_npu\nexcept ImportError:\n    pass\ntorch.cuda.synchronize()\n"
    assert migrate(src) == src.replace("torch.cuda", "torch.npu")


@pytest.mark.parametrize("src", [p for p in fixture_inputs() if p.suffix == ".py"], ids=lambda p: p.name)
def test_statement_skipping_changes_nothing(src, monkeypatch):
    data = src.read_bytes()
    fast = engine.migrate_python(data, rules(), "x")
    monkeypatch.setattr(pyfile, "statement_map", lambda data, rules: None)
    full = engine.migrate_python(data, rules(), "x")
    assert fast[0] == full[0]
    assert fast[1] == full[1]
