"""The package's import graph: no cycles, and a plain-PyTorch core that knows nothing of what uses it."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "seq2seq_attn"
# the model parts and the algorithms around them: usable in a notebook without Lightning or the CLI
CORE = ("seq2seq_attn.modules", "seq2seq_attn.architecture", "seq2seq_attn.search", "seq2seq_attn.loss",
        "seq2seq_attn.metrics", "seq2seq_attn.optim", "seq2seq_attn.quantize")  # fmt: skip
FORBIDDEN_IN_CORE = ("pytorch_lightning", "lightning", "wandb", "seq2seq_attn.cli", "seq2seq_attn.lightning_cli",
                     "seq2seq_attn.tool_commands", "seq2seq_attn.ablation", "seq2seq_attn.lit_module")  # fmt: skip


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function (lazy imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges = {}
    for name, path in modules.items():
        # a package's __init__ re-exports its children: an edge to the package is not an edge to them
        edges[name] = {m for m in imports(path) if m in modules and m != name and not name.startswith(m + ".")}
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return []

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_the_import_graph_has_no_cycle():
    cycle = find_cycle(graph())
    assert not cycle, " -> ".join(cycle)


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_core_imports_no_lightning_cli_or_ablation():
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        if name.startswith(CORE):
            bad = sorted(m for m in imports(path) if m.startswith(FORBIDDEN_IN_CORE))
            assert not bad, f"{name} imports {bad}"
