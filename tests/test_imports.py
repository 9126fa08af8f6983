"""Who may import whom inside nsqmp, read from the source with `ast` (lazy imports inside
functions count too). The rules (docs/architecture.md, DESIGN.md "Role packages never
import each other", STYLE.md):

* A role package (ROLES) imports only itself and the shared code (SHARED packages, the
  top-level modules, the extension nsqmp._native). The one exception is the supervisor,
  which builds the role objects it forks: it may import the `role` module of the roles it
  forks (SUPERVISOR_FORKS), nothing else of theirs.
* Shared code never imports a role package: otherwise a role would reach another through it.
* The broker (roles and shared code) never imports a tool (TOOLS): benchmarks and the Spark
  connector live beside it, not in it. Tools may import anything they measure or drive.
* `diskqueue` imports nothing else of nsqmp but LEAVES: the extension (its C encoder) and
  `nsqmp.layouts` (the byte layouts the C header declares), which import nothing of nsqmp
  but each other.
* The command line (ENTRY_POINTS) dispatches to everything.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "nsqmp"

ROLES = {"supervisor", "acceptor", "router", "timer", "lookupd", "admin"}
SHARED = {"ipc", "diskqueue", "protocol", "config", "client", "metrics"}
TOOLS = {"bench", "spark", "utils"}
ENTRY_POINTS = {"cli", "__main__"}
SUPERVISOR_FORKS = {"nsqmp.acceptor.role", "nsqmp.router.role", "nsqmp.timer.role"}
LEAVES = {"_native", "layouts"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every nsqmp import in the file, wherever it sits."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return _imports_in(path.read_text(), package, str(path))


def _imports_in(text: str, package: str, where: str = "<source>") -> list[tuple[int, str]]:
    """_imported for source text whose module lives in package (for relative imports)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(text, where)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from nsqmp import router` and `from nsqmp.router import role` name modules too
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
            found.append((node.lineno, target))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return [(line, name) for line, name in found if name == "nsqmp" or name.startswith("nsqmp.")]


def _top(name: str) -> str:
    """The first component under nsqmp: a package or a top-level module."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def _is_package(top: str) -> bool:
    return (PACKAGE / top).is_dir()


def _violation(source: str, target: str) -> str | None:
    """Why importing target from module source breaks a rule, or None."""
    mine, theirs = _top(source), _top(target)
    if not theirs or theirs == mine or not _is_package(theirs) and not (PACKAGE / f"{theirs}.py").exists():
        return None  # `nsqmp` itself, its own package, or a name inside a module (a class)
    if mine in ENTRY_POINTS or mine in TOOLS:
        return None
    if theirs in TOOLS or theirs in ENTRY_POINTS:
        return f"the broker imports the tool or entry point {theirs!r}"
    if mine in LEAVES and theirs not in LEAVES:
        return f"{mine!r} is a leaf: it imports nothing of nsqmp but the other leaves"
    if mine == "diskqueue" and theirs not in LEAVES:
        return "diskqueue imports nothing else of nsqmp"
    if theirs in ROLES:
        if mine == "supervisor" and any(target == m or target.startswith(m + ".") for m in SUPERVISOR_FORKS):
            return None
        if mine in ROLES:
            return f"role {mine!r} imports role {theirs!r}"
        return f"shared code ({mine!r}) imports role {theirs!r}"
    return None


def test_the_package_list_covers_every_package():
    """A new package must be placed in one of the lists before it can be checked."""
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages <= ROLES | SHARED | TOOLS, packages - (ROLES | SHARED | TOOLS)


def test_roles_never_import_each_other_and_the_broker_imports_no_tool():
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _module_name(path)
        seen = set()
        for line, target in _imported(path):
            why = _violation(source, target)
            if why and (line, why) not in seen:  # `from x import y` names x and x.y: once
                seen.add((line, why))
                problems.append(f"{path.relative_to(PACKAGE.parent)}:{line}: imports {target}: {why}")
    assert not problems, "\n".join(problems)


def test_the_checker_sees_what_it_must():
    """The rule catches what it is for: lazy and relative imports, `from nsqmp import x`."""
    assert _violation("nsqmp.acceptor.role", "nsqmp.router.lateness")
    assert _violation("nsqmp.router.topic", "nsqmp.timer")
    assert _violation("nsqmp.ipc.mesh", "nsqmp.router.role")
    assert _violation("nsqmp.diskqueue.segment", "nsqmp.ipc.records")
    assert not _violation("nsqmp.diskqueue.segment", "nsqmp.layouts")
    assert _violation("nsqmp.layouts", "nsqmp.ipc.records")
    assert _violation("nsqmp.router.role", "nsqmp.bench.inflight")
    assert _violation("nsqmp.supervisor.arbiter", "nsqmp.router.topic")
    assert not _violation("nsqmp.supervisor.arbiter", "nsqmp.router.role")
    assert not _violation("nsqmp.acceptor.role", "nsqmp.ipc.records")
    assert not _violation("nsqmp.bench.heap", "nsqmp.timer.role")
    text = "def f():\n    from nsqmp import router\n    from ..timer import heap\n    import nsqmp.ipc.mesh\n"
    assert {name for _, name in _imports_in(text, "nsqmp.acceptor")} >= {
        "nsqmp.router", "nsqmp.timer.heap", "nsqmp.ipc.mesh"}
