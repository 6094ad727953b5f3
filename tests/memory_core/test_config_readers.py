"""Every MemoryConfig field has a reader in the service's code: a knob nothing reads is a lie to its user.

Readers are found in the source of the service's packages (not in a list kept here): an
attribute access ``<something config-like>.<field>`` (``config.topk_facts``,
``run.config.timezone``, ``ctx.base_config.min_score``, ``settings.memory.timezone``, ``cfg.x``),
or ``getattr(<anything>, "<field>")``. The module that declares the fields does not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

from memory_core.config import MemoryConfig
from memory_core.settings import PROJECT_ROOT

PACKAGES = ("memory_core", "workers", "api")
DECLARING_MODULE = PROJECT_ROOT / "memory_core" / "config.py"


def _holder_name(node: ast.expr) -> str:
    """The last name of the expression an attribute is read from (``run.config`` -> ``config``)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _holder_name(node.func)
    if isinstance(node, ast.Subscript):
        return _holder_name(node.value)
    return ""


def _config_like(name: str) -> bool:
    lowered = name.lower()
    return "config" in lowered or "cfg" in lowered or lowered == "memory"


def fields_read(root: Path = PROJECT_ROOT) -> set[str]:
    """The MemoryConfig fields read somewhere in the service's packages."""
    fields = set(MemoryConfig.model_fields)
    found: set[str] = set()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if path.resolve() == DECLARING_MODULE.resolve() or "versions" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
                if isinstance(node, ast.Attribute) and node.attr in fields and _config_like(_holder_name(node.value)):
                    found.add(node.attr)
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "getattr"
                    and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in fields
                ):
                    found.add(str(node.args[1].value))
    return found


def test_every_config_field_has_a_reader() -> None:
    unread = set(MemoryConfig.model_fields) - fields_read()
    assert not unread, f"MemoryConfig fields nothing reads (wire them or remove them): {sorted(unread)}"


def test_the_scan_sees_a_field_read_and_misses_one_not_read(tmp_path: Path) -> None:
    # The scan itself: a module reading one field through a config object and one through getattr.
    package = tmp_path / "memory_core"
    package.mkdir()
    (package / "reader.py").write_text(
        "def use(run, cfg):\n    return run.config.topk_facts, getattr(cfg, 'min_score'), run.timezone\n",
        encoding="utf-8",
    )
    for other in PACKAGES[1:]:
        (tmp_path / other).mkdir()
    found = fields_read(tmp_path)
    assert found == {"topk_facts", "min_score"}
