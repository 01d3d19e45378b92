"""The package layout stays readable: no import circles, no private names across modules,
every module on the design map, every shipped gin file parses."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("mnmt", "fitting", "launch")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module `name` refers to (a module, or the package holding an attribute)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _imports(module: str) -> list[tuple[str, str | None, int]]:
    """(imported project module, imported name or None, line) for every import in `module`,
    module-level or inside functions alike."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name)
                if target:
                    out.append((target, None, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = module.split(".")
                anchor = anchor if _is_package(module) else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = _resolve(f"{base}.{alias.name}")
                if sub == f"{base}.{alias.name}":  # a submodule
                    out.append((sub, None, node.lineno))
                elif (target := _resolve(base)) is not None:
                    out.append((target, alias.name, node.lineno))
    return out


def _graph() -> dict[str, set[str]]:
    graph = {m: set() for m in MODULES}
    for module in MODULES:
        for target, _, _ in _imports(module):
            if target != module:
                graph[module].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_in_mnmt_fitting_or_launch():
    cycles = _cycles(_graph())
    assert not cycles, "import circles (function-local imports included): " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_dependency_directions():
    """fitting never imports mnmt or launch; mnmt never imports launch."""
    bad = []
    for module in MODULES:
        top = module.split(".")[0]
        for target, _, line in _imports(module):
            other = target.split(".")[0]
            if (top == "fitting" and other in ("mnmt", "launch")) or \
                    (top == "mnmt" and other == "launch"):
                bad.append(f"{MODULES[module].relative_to(REPO)}:{line} imports {target}")
    assert not bad, "\n".join(bad)


# fitting's rooms, lowest first: a module may import from its own room and the rooms below it.
FITTING_ROOMS = ("fitting.core", "fitting.data", "fitting.laws", "fitting.intervals",
                 "fitting.design", "fitting.plots", "fitting.report", "fitting.cli")


def _fitting_room(module: str) -> str:
    """The room of a fitting module: its sub-package, or ``fitting`` for the top-level modules
    (``fitting``, ``fitting.test_utils``), which sit above every room."""
    parts = module.split(".")
    return ".".join(parts[:2]) if ".".join(parts[:2]) in FITTING_ROOMS else "fitting"


def _room_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, targets in _graph().items():
        if module.split(".")[0] != "fitting":
            continue
        room = _fitting_room(module)
        graph.setdefault(room, set()).update(
            _fitting_room(t) for t in targets if t.split(".")[0] == "fitting"
            and _fitting_room(t) != room)
    return graph


def test_fitting_is_in_rooms():
    """Every fitting module lives in a room, except the top-level test_utils."""
    top = sorted(m for m in MODULES if m.startswith("fitting") and _fitting_room(m) == "fitting")
    assert top == ["fitting", "fitting.test_utils"]
    assert set(_room_graph()) == {*FITTING_ROOMS, "fitting"}


def test_no_import_circles_between_fitting_rooms():
    cycles = _cycles(_room_graph())
    assert not cycles, "circles between fitting's sub-packages: " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_fitting_rooms_import_downwards_only():
    """core ← data ← laws ← intervals ← design ← plots ← report ← cli: laws never import intervals,
    plots or reports, plots never import reports, nothing but the cli imports the cli, and
    nothing in a room imports the top-level test_utils."""
    order = {room: rank for rank, room in enumerate((*FITTING_ROOMS, "fitting"))}
    bad = []
    for module in MODULES:
        if module.split(".")[0] != "fitting":
            continue
        for target, _, line in _imports(module):
            if target.split(".")[0] == "fitting" and \
                    order[_fitting_room(target)] > order[_fitting_room(module)]:
                bad.append(f"{MODULES[module].relative_to(REPO)}:{line} imports {target}")
    assert not bad, "imports up the room order " + " ← ".join(order) + ":\n" + "\n".join(bad)


def test_the_room_check_sees_an_upward_import():
    assert _fitting_room("fitting.laws.size.power") == "fitting.laws"
    assert _fitting_room("fitting.cli.entry") == "fitting.cli"
    assert _fitting_room("fitting.test_utils") == "fitting"
    assert _cycles({"fitting.laws": {"fitting.report"}, "fitting.report": {"fitting.laws"}})


def _role(source: str) -> set[str]:
    """The roles a module's source plays: ``"cli"`` (it imports argparse or defines a top-level
    ``*_command`` function) and ``"section"`` (it defines a top-level report-section writer: a
    public ``*_section`` function whose first parameter is the document ``doc``)."""
    tree = ast.parse(source)
    roles = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            if "argparse" in names:
                roles.add("cli")
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            if node.name.endswith("_command"):
                roles.add("cli")
            if node.name.endswith("_section") and node.args.args and \
                    node.args.args[0].arg == "doc":
                roles.add("section")
    return roles


def test_the_role_finder_sees_a_command_and_a_section():
    assert _role("import argparse\n") == {"cli"}
    assert _role("def fit_command(args):\n    pass\n") == {"cli"}
    assert _role("def power_section(doc, rep):\n    pass\n") == {"section"}
    assert _role("def register_section(section):\n    pass\n") == set()


def test_no_folder_of_fitting_mixes_command_lines_with_report_sections():
    """Command-line entry points live in fitting/cli/ only, report sections in
    fitting/report/sections/ only."""
    misplaced = []
    for module, path in MODULES.items():
        if not module.startswith("fitting."):
            continue
        for role in _role(path.read_text()):
            home = {"cli": "fitting.cli", "section": "fitting.report.sections"}[role]
            if not module.startswith(home + "."):
                misplaced.append(f"{path.relative_to(REPO)}: a {role} module outside {home}")
    assert not misplaced, "\n".join(misplaced)


MAX_KEYWORDS = 8


def _keyword_counts(source: str) -> dict[str, int]:
    """Each function's keyword parameters: those with a default and the keyword-only ones."""
    return {node.name: len(node.args.kwonlyargs) + len(node.args.defaults)
            for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)}


def test_the_keyword_count_sees_defaults_and_keyword_only_parameters():
    assert _keyword_counts("def f(a, b=1, *, c, d=2):\n    pass\n") == {"f": 3}


def test_no_function_in_fitting_takes_more_than_8_keyword_parameters():
    """Long keyword lists become options objects (``FitOptions``, ``ReportOptions``, …)."""
    bad = []
    for module, path in MODULES.items():
        if not module.startswith("fitting"):
            continue
        for name, count in _keyword_counts(path.read_text()).items():
            if count > MAX_KEYWORDS:
                bad.append(f"{path.relative_to(REPO)}: {name} takes {count} keyword parameters")
    assert not bad, "\n".join(bad)


#: the fit functions that still pass ``**kwargs`` on, with why (the keyword count cannot see
#: what they hide): DPL's table fit hands ``mnmt-fit fit --option`` values to ``fit_dpl``
KWARGS_FITS = {"fitting/laws/mixture/dpl.py:fit_from_table"}


def test_no_fit_function_hides_its_keywords_in_kwargs():
    """A law's fit function names its keywords (options objects where they are many), so that
    the count above sees them; ``**kwargs`` handed on to another fit function would hide them."""
    bad = []
    for module, path in MODULES.items():
        if not module.startswith("fitting"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.FunctionDef) and node.name.startswith("fit")
                    and node.args.kwarg is not None):
                where = f"{path.relative_to(REPO)}:{node.name}"
                if where not in KWARGS_FITS:
                    bad.append(f"{where} takes **{node.args.kwarg.arg}")
    assert not bad, "\n".join(bad)


def test_additions_have_their_places():
    """design.md says where a new law, report section, interval, subcommand, study preset and
    benchmark go, and those places exist."""
    design = (REPO / "docs" / "development" / "design.md").read_text()
    where = design.split("## Where additions go", 1)[1].split("\n## ", 1)[0]
    for kind, place in (("A law", "fitting/laws/"), ("A report section", "fitting/report/sections/"),
                        ("An interval", "fitting/intervals/"), ("subcommand", "fitting/cli/"),
                        ("A study preset", "t5x_configs/studies/"),
                        ("A benchmark", "benchmarks/speed/")):
        assert kind in where and place in where, (kind, place)
        assert (REPO / place).is_dir()


def _private_name_uses() -> list[str]:
    bad = []
    roots = [REPO / p for p in PACKAGES] + [REPO / "benchmarks", REPO / "tests"]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module:
                    for alias in node.names:
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            bad.append(f"{path.relative_to(REPO)}:{node.lineno} imports "
                                       f"{alias.name} from {node.module}")
    return bad


def test_no_private_name_is_imported_from_another_module():
    bad = _private_name_uses()
    assert not bad, "\n".join(bad)


def test_benchmarks_do_not_reach_into_tests():
    bad = [f"{p.relative_to(REPO)}" for p in sorted((REPO / "benchmarks").rglob("*.py"))
           if '"tests"' in p.read_text() or "'tests'" in p.read_text()]
    assert not bad, f"benchmarks importing from tests/: {bad}"


#: benchmarks/'s rooms by role; beside them only the shared module, the package index and the
#: scale benchmark, whose path the issues name
BENCHMARK_ROOMS = ("speed", "validation", "studies")
BENCHMARK_TOP = {"__init__.py", "common.py", "scalebench.py"}


def test_every_benchmark_lives_in_a_room():
    top = {p.name for p in (REPO / "benchmarks").glob("*.py")}
    assert top <= BENCHMARK_TOP, f"benchmark scripts outside a room: {sorted(top - BENCHMARK_TOP)}"
    rooms = {p.name for p in (REPO / "benchmarks").iterdir()
             if p.is_dir() and any(p.glob("*.py"))}
    assert rooms == set(BENCHMARK_ROOMS)
    names = [p.name for room in BENCHMARK_ROOMS for p in (REPO / "benchmarks" / room).glob("*.py")
             if p.name != "__init__.py"]
    assert len(names) == len(set(names)), "two benchmarks of one name (the tests load by name)"


def test_every_module_is_on_the_design_map():
    design = (REPO / "docs" / "development" / "design.md").read_text()
    # Every module is named by its path relative to the repository root.
    missing = [m for m in MODULES if MODULES[m].name != "__init__.py"
               and str(MODULES[m].relative_to(REPO)) not in design]
    assert not missing, f"modules missing from docs/development/design.md: {missing}"


def _fitting_packages() -> list[str]:
    return [m for m in MODULES if m.startswith("fitting") and _is_package(m)]


def test_every_fitting_index_names_each_module_of_its_package():
    """A package's ``__init__`` docstring is its index: it names every module and sub-package
    in it (``__main__`` aside), so that the index a newcomer reads is true."""
    missing = []
    for package in _fitting_packages():
        doc = ast.get_docstring(ast.parse(MODULES[package].read_text())) or ""
        named = {ref.rsplit(".", 1)[-1] for ref in re.findall(r":mod:`~?([\w.]+)`", doc)}
        children = {m.rsplit(".", 1)[-1] for m in MODULES
                    if m.rpartition(".")[0] == package and not m.endswith("__main__")}
        missing += [f"{package}.{c}" for c in sorted(children - named)]
    assert not missing, f"modules missing from their package's index: {missing}"


#: the longest module docstring of fitting (package indexes aside): about ten lines say what a
#: module is for; derivations belong in docs/reference/laws.md
MAX_DOCSTRING_LINES = 20


def test_fitting_module_docstrings_say_what_the_module_is_for_briefly():
    long = []
    for module, path in MODULES.items():
        if module.startswith("fitting") and not _is_package(module):
            doc = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
            if len(doc.splitlines()) > MAX_DOCSTRING_LINES:
                long.append(f"{path.relative_to(REPO)}: {len(doc.splitlines())} lines")
    assert not long, "module docstrings over " + str(MAX_DOCSTRING_LINES) + " lines: " + \
        ", ".join(long)


def test_the_design_map_draws_fittings_rooms_in_their_import_order():
    """design.md's room diagram lists the rooms top (cli) to bottom (core), the order
    :data:`FITTING_ROOMS` enforces."""
    design = (REPO / "docs" / "development" / "design.md").read_text()
    block = design.split("### `fitting/`", 1)[1].split("```", 2)[1]
    drawn = re.findall(r"^(\w+)/ ", block, re.M)
    assert drawn == [room.split(".")[1] for room in reversed(FITTING_ROOMS)], drawn


def test_no_issue_numbers_or_machine_paths_in_code_and_docs():
    bad = []
    for root in ("mnmt", "fitting", "launch", "docs", "benchmarks", "t5x_configs"):
        for path in sorted((REPO / root).rglob("*")):
            if path.suffix not in (".py", ".md", ".gin") or "RESULTS.md" in path.name:
                continue
            for lineno, line in enumerate(path.read_text().splitlines(), start=1):
                low = line.lower()
                if "issue " in low and any(ch.isdigit() for ch in low.split("issue ", 1)[1][:3]):
                    bad.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()[:80]}")
                if "/work/" in line or "/root/" in line:
                    bad.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()[:80]}")
    assert not bad, "\n".join(bad)


def test_no_results_section_numbers_in_code_and_docs():
    """Code and docs name benchmarks/RESULTS.md, never one of its numbered sections: the numbers
    move as the record grows, the file's dated entries do not."""
    cited = re.compile(r"RESULTS(\.md)?,? *(§|section )? *\d|§ *\d\d")  # papers' §: one digit
    bad = [f"{path.relative_to(REPO)}:{lineno}"
           for root in ("mnmt", "fitting", "launch", "docs", "benchmarks", "t5x_configs",
                        "tests")
           for path in sorted((REPO / root).rglob("*"))
           if path.suffix in (".py", ".md", ".gin") and path.name != "RESULTS.md"
           for lineno, line in enumerate(path.read_text().splitlines(), start=1)
           if cited.search(line)]
    assert not bad, "RESULTS.md section numbers cited: " + ", ".join(bad)


GIN_FILES = sorted(str(p.relative_to(REPO)) for p in (REPO / "t5x_configs").rglob("*.gin"))


@pytest.mark.parametrize("gin_file", GIN_FILES)
def test_every_shipped_gin_file_parses(gin_file, tmp_path, monkeypatch):
    """Each file parses with the configurables it names; a study file builds its StudySpec and
    a run or model file, included after runs/train.gin, builds its TrainConfig."""
    import gin

    from mnmt.gin_files import parse_files_and_bindings
    from mnmt.study.spec import study_spec
    from mnmt.training import train as train_cli
    from mnmt.training.config import TrainConfig

    gin.clear_config()
    try:
        if gin_file.startswith("t5x_configs/studies/"):
            parse_files_and_bindings([str(REPO / gin_file)], [])
            assert study_spec().name  # the file's bindings, through gin
            return
        required = [f"MODEL_DIR = '{tmp_path}/m'", "MIXTURE_OR_TASK_NAME = 'mix'",
                    "MODEL_SIZE = 'mini-1'", "VOCABULARY_PATH = '/nonexistent.model'",
                    "TRAIN_STEPS = 3", "EVAL_TASKS = {'en-de': 't'}", "TEMPERATURE = 5.0"]
        files = [str(REPO / gin_file)]
        if not gin_file.startswith("t5x_configs/runs/"):
            files = [str(REPO / "t5x_configs/runs/train.gin")] + files
        monkeypatch.chdir(REPO)
        train_cli.parse_gin(files, required)
        config = TrainConfig()
        assert config.train_steps > 0 and config.inputs.batch_size > 0
        assert config.eval.period > 0 and config.checkpoint.period > 0
    finally:
        gin.clear_config()
