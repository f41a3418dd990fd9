"""The import contract: each package of ethereal_kafka imports only the layers below it, as docs/architecture.md
draws them. Every import counts: module level, inside functions, and under `TYPE_CHECKING`.

A layer that needs something from above reaches it through a registration (a package entry point), not an import:
the api finds the runner (`ethereal_kafka.executors`), the runner finds the live web UI (`ethereal_kafka.ui`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import ethereal_kafka

ROOT = Path(ethereal_kafka.__path__[0])

#: What each top-level package or module may import besides itself (docs/architecture.md, "Layers").
BASE = {"errors", "paths", "faults"}
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "paths": set(),
    "faults": set(),
    "config": {"errors"},
    "serde": {"config", "errors"},
    "api": {"config", "errors"},
    "connectors": {"serde", "config"} | BASE,
    "plan": {"api", "connectors", "serde", "config"} | BASE,
    "broker": BASE,
    "checkpoint": {"connectors", "config"} | BASE,
    "eos": {"plan", "checkpoint", "connectors", "serde", "config"} | BASE,
    "runtime": {"eos", "plan", "checkpoint", "connectors", "serde", "api", "config"} | BASE,
    "ui": {"runtime", "eos", "plan", "checkpoint", "connectors", "api", "config"} | BASE,
    "testing": {"runtime", "eos", "checkpoint", "broker", "connectors", "serde", "plan", "api", "config"}
    | BASE,
    "demo": {"runtime", "eos", "checkpoint", "broker", "connectors", "api", "config"} | BASE,
    "cli": {
        "demo",
        "ui",
        "runtime",
        "eos",
        "checkpoint",
        "broker",
        "connectors",
        "serde",
        "plan",
        "api",
        "config",
    }
    | BASE,
    "examples": {"api"},
    "deploy": {"cli"},
    "__main__": {"cli"},
}


def _layer(module: str) -> str | None:
    """`ethereal_kafka.eos.phase_one` → `eos`; None outside the package."""
    parts = module.split(".")
    return parts[1] if parts[0] == "ethereal_kafka" and len(parts) > 1 else None


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """`(line, imported module)` of every import in `path`; `from ethereal_kafka import faults` names `faults`."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            if base == "ethereal_kafka":
                out += [(node.lineno, f"ethereal_kafka.{alias.name}") for alias in node.names]
            else:
                out.append((node.lineno, base))
    return out


def violations(root: Path = ROOT) -> list[str]:
    """One line per import of the package at `root` that crosses the contract."""
    found = []
    for path in sorted(root.rglob("*.py")):
        layer = _layer(_module_name(path, root))
        if layer is None:
            continue
        for line, target in _imports(path, root):
            other = _layer(target)
            if other is None or other == layer:
                continue
            if other not in ALLOWED.get(layer, set()):
                found.append(f"{path.relative_to(root.parent)}:{line}: {layer} imports {target} ({other})")
    return found


def test_every_package_is_in_the_contract() -> None:
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in ROOT.glob("*.py") if p.stem != "__init__"}
    assert packages | modules == set(ALLOWED), "add the new layer to ALLOWED and to docs/architecture.md"


def test_imports_point_down_the_layers() -> None:
    assert violations() == []


def test_the_contract_catches_upward_imports(tmp_path: Path) -> None:
    """The checker itself, on a package of two modules: a connector importing the protocol (at module level and
    inside a function, relatively) is reported; the protocol importing a connector is not."""
    package = tmp_path / "ethereal_kafka"
    (package / "connectors").mkdir(parents=True)
    (package / "eos").mkdir()
    for folder in (package, package / "connectors", package / "eos"):
        (folder / "__init__.py").write_text("", encoding="utf-8")
    (package / "connectors" / "probe.py").write_text(
        "from ethereal_kafka.eos.names import progress_topic\n\n\ndef f():\n    from ..eos import names\n",
        encoding="utf-8",
    )
    (package / "eos" / "ok.py").write_text("from ethereal_kafka.connectors import probe\n", encoding="utf-8")
    found = violations(package)
    assert found == [
        "ethereal_kafka/connectors/probe.py:1: connectors imports ethereal_kafka.eos.names (eos)",
        "ethereal_kafka/connectors/probe.py:5: connectors imports ethereal_kafka.eos (eos)",
    ]
