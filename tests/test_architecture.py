"""The package's shape, read from its source: layers that import only downwards, no import
circles, the core never imports notebook code, settings resolved by one function that only the
surfaces call, no private member used across modules, providers found through the registry.

These read the code as text (``ast``), so they fail the moment someone adds an import or a call
that breaks a rule, whether or not a test happens to exercise that path. An import counts
wherever it stands: at the top, inside a function, or under ``if TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

import flownb

PACKAGE = Path(flownb.__file__).parent

# The surfaces: each builds its run configuration with settings.resolve_run_config, the one
# function that does, and only they call it; nothing but settings.py reads the environment.
SURFACES = {
    # load_flow / load_local, LocalFlow() / LocalCore(), from_spec (a worker takes its own keys)
    "flownb.core.local",
    "flownb.flows.client",  # flownb.Client: the service address and key
    "flownb.cli.opening",  # what FLOW on a command line opens (flownb info / run / eval)
    "flownb.notebook.magics",  # %flow connect, flow ids without a connection
    "flownb.runtime.runlog",  # runs(): the run log of FLOWNB_HOME
    # evaluate(): only when no variant is a local flow with its home
    "flownb.evaluation.running.run",
    "flownb.evaluation.reports.history",  # load_report() / reports()
    "flownb.frames.batch_api.listing",  # list_batches() / cancel_batch()
    "flownb.server.service",  # ServerConfig (each `serve --workers` process starts there)
    "flownb.cli.serve",  # flownb serve / keys / gc
    "flownb.config.endpoint_list",  # endpoints() / flownb endpoints: FLOWNB_HOME's flownb.toml
    # RunConfig.on_endpoint: a surface's configuration moved to another endpoint (with_endpoint)
    # by the same rule, from the settings that surface was given
    "flownb.config.settings",
}
# Only these may import notebook code from outside it: %load_ext.
NOT_CORE = {"flownb"}

# The layers, lowest first: each is a folder of flownb/ (the ground floor: three root modules),
# and a module imports only modules of its own layer or of lower ones. A module is in the layer
# of the folder it sits in; the package root `flownb` is only itself, so a new top-level module
# must be placed here on purpose.
LAYERS: list[tuple[str, set[str]]] = [
    ("ground", {"flownb.errors", "flownb.error_map", "flownb._version"}),
    ("show", {"flownb.show"}),  # display, progress bars, meter, notices, spreadsheet CSV
    ("config", {"flownb.config"}),  # settings (the only reader of env vars), endpoints, pricing
    ("infra", {"flownb.infra"}),  # the background event loop, tracing, media, writable homes
    ("flowfile", {"flownb.flowfile"}),  # the flow file: model, template, checks, drawing
    ("providers", {"flownb.providers"}),  # one call to a model, per vendor
    ("runtime", {"flownb.runtime"}),  # engine, pipeline, results, events, cache, run log
    ("core", {"flownb.core"}),  # what a loaded flow is and runs: FlowCore, LocalCore, specs
    ("scorers", {"flownb.scorers"}),  # flownb.scorers
    ("views", {"flownb.views"}),  # what a notebook shows of a run: live views, the form
    ("frames", {"flownb.frames"}),  # DataFrames: pandas/polars, preview, batch API, Dask
    ("flows", {"flownb.flows"}),  # the flows users hold, composed from the core + features
    # flownb.evaluate and its reports, in folders that name the parts: record (what a report is
    # made of, kept in the run log), figures, html, decision, labels, reports, running
    ("evaluation", {"flownb.evaluation"}),
    (
        "surfaces",
        {
            "flownb",  # the public API
            "flownb.__main__",
            "flownb.cli",
            "flownb.notebook",
            "flownb.server",
            "flownb.testing",
        },
    ),
]
ROOT = "flownb"


@functools.cache
def modules() -> dict[str, ast.Module]:
    """Return every flownb module's parsed source by dotted name, parsed once per session."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements that run at import time (not under ``if TYPE_CHECKING``, not in functions)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            if not _is_type_checking(stmt.test):
                yield from _top_level(stmt.body)
            yield from _top_level(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)):
                yield from _top_level(block)
        else:
            yield stmt


def layer_of(name: str) -> int:
    """Return the index in :data:`LAYERS` of the layer module ``name`` is in.

    Raises:
        KeyError: no layer names the module (a new module must be placed on purpose).
    """
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            inside = prefix != ROOT and name.startswith(prefix + ".")
            if (name == prefix or inside) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    if best is None:
        raise KeyError(f"{name} is in no layer of LAYERS")
    return best[1]


def _targets(name: str, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The flownb modules an import statement in module ``name`` loads."""
    out: set[str] = set()
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    package = name if name in known and _is_package(name) else name.rpartition(".")[0]
    if node.level:
        base = package.split(".")
        base = base[: len(base) - (node.level - 1)]
        module = ".".join([*base, node.module] if node.module else base)
    else:
        module = node.module or ""
    names = [alias.name for alias in node.names]
    subs = {f"{module}.{n}" for n in names} & known  # `from . import x` / `from .pkg import mod`
    out |= subs
    if module in known and len(subs) < len(names):  # something is taken from the module itself
        out.add(module)
    return out


def _is_package(name: str) -> bool:
    return (PACKAGE.parent / Path(*name.split(".")) / "__init__.py").exists()


@functools.cache
def import_graph(*, module_level: bool = False) -> dict[str, set[str]]:
    """Return module -> the flownb modules it imports. By default every import statement
    counts, wherever it stands (in a function, under ``TYPE_CHECKING``): a lazy import is still
    a dependency. ``module_level=True``: only those that run when the module is imported.
    Cached: the tests share one graph (treat it as read-only)."""
    mods = modules()
    known = set(mods)
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, tree in mods.items():
        stmts = list(_top_level(tree.body)) if module_level else list(ast.walk(tree))
        for node in stmts:
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[name] |= _targets(name, node, known) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_counts_lazy_and_type_checking_imports() -> None:
    graph = import_graph()
    assert "flownb.views.widgets" in graph["flownb.flows.base"]  # inside a function
    assert "flownb.runtime.result" in graph["flownb.views.widgets"]  # under TYPE_CHECKING only
    assert "flownb.views.widgets" not in import_graph(module_level=True)["flownb.flows.base"]


def test_no_import_circle_at_all() -> None:
    assert cycles(import_graph()) == []


def test_every_module_is_in_a_layer() -> None:
    for name in modules():
        layer_of(name)


def test_every_layer_is_a_folder_and_the_root_holds_only_the_named_modules() -> None:
    for _, prefixes in LAYERS:
        for prefix in prefixes - {ROOT}:
            path = PACKAGE.parent / Path(*prefix.split("."))
            assert path.is_dir() or path.with_suffix(".py").is_file(), prefix
            if path.is_dir():
                assert (path / "__init__.py").is_file(), prefix
    named = {p for _, prefixes in LAYERS for p in prefixes}
    top = {f"flownb.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert top <= named, top - named
    with pytest.raises(KeyError, match="in no layer"):
        layer_of("flownb.loose_module")  # the root package does not swallow a new module


def test_nothing_imports_the_package_root() -> None:
    # The root imports every feature (wiring): a module that imports it for one name, such as
    # the server for __version__, drags all of them in. _version.py holds that one.
    graph = import_graph()
    assert [name for name, targets in graph.items() if ROOT in targets] == []
    tree = modules()["flownb._version"]
    (version,) = [
        n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
    ]
    pyproject = (PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert f'\nversion = "{version}"\n' in pyproject


def test_the_notebook_shares_only_the_inputs_module_of_the_cli() -> None:
    # The magics parse what users type as the CLI does (cli/inputs.py); the rest of the CLI
    # (click, the commands) is the command line's own, and evaluation/ reads scorer files.
    graph = import_graph()
    for name, targets in graph.items():
        if name.startswith("flownb.notebook"):
            assert {t for t in targets if t.startswith("flownb.cli")} <= {"flownb.cli.inputs"}, name


def test_no_module_imports_a_higher_layer() -> None:
    upward = [
        f"{name} ({LAYERS[layer_of(name)][0]}) -> {target} ({LAYERS[layer_of(target)][0]})"
        for name, targets in import_graph().items()
        for target in sorted(targets)
        if layer_of(target) > layer_of(name)
    ]
    assert upward == []


def test_the_layer_check_catches_an_import_that_climbs() -> None:
    assert (
        layer_of("flownb.core.local")
        < layer_of("flownb.frames.run")
        < layer_of("flownb.flows.local")
        < layer_of("flownb.cli.main")
    )
    assert layer_of("flownb.cli.eval") > layer_of("flownb.evaluation.running.run")
    assert layer_of("flownb.core.spec") < layer_of("flownb.frames.dask.run")
    assert layer_of("flownb.core.local") < layer_of("flownb.scorers.judge")
    assert layer_of("flownb.frames.run") < layer_of("flownb.flows.base")
    assert layer_of("flownb.errors") == 0 < layer_of("flownb.show.display")
    assert layer_of("flownb") == layer_of("flownb.server.app") == len(LAYERS) - 1


def test_the_core_imports_none_of_the_features_built_on_it() -> None:
    # The runnable core stands below every feature: frames, previews, views, scorers, the
    # surface's flows; those import the core, never the reverse.
    graph = import_graph()
    features = (
        "flownb.flows",
        "flownb.frames",
        "flownb.views",
        "flownb.notebook",
        "flownb.scorers",
        "flownb.evaluation",
    )
    core = [name for name in graph if name.startswith("flownb.core")]
    assert core
    for name in core:
        assert not [t for t in graph[name] if t.startswith(features)], name


def test_the_flows_users_hold_import_their_features_directly() -> None:
    # The surface's flows open frames, previews, the form and the live views by importing
    # them (inside the methods that open them: `import flownb` stays cheap).
    graph = import_graph()
    opened = graph["flownb.flows.base"]
    for feature in (
        "flownb.frames.run",
        "flownb.frames.preview",
        "flownb.frames.dask.run",
        "flownb.frames.batch_api.run",
        "flownb.views.widgets",
        "flownb.views.live",
        "flownb.views.live_text",
    ):
        assert feature in opened, feature
    assert "flownb.core.flow" in opened


def _isinstance_names(tree: ast.Module) -> Iterator[str]:
    """Every class name an ``isinstance`` call in ``tree`` checks against."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
        ):
            for leaf in ast.walk(node.args[1]):
                if isinstance(leaf, ast.Name):
                    yield leaf.id
                elif isinstance(leaf, ast.Attribute):
                    yield leaf.attr


def test_no_feature_asks_a_flow_its_class() -> None:
    # Features ask the flow what it can do (FlowCore.local(), .served), not which kind it is:
    # outside the flows themselves no isinstance names a kind of flow. (Whether a value is a
    # flow at all, FlowCore or BaseFlow, is a check of the caller's input.)
    flow_classes = {"LocalFlow", "LocalCore", "RemoteFlow", "_GatedFlow"}
    offenders = {
        name: sorted(set(_isinstance_names(tree)) & flow_classes)
        for name, tree in modules().items()
        if not name.startswith(("flownb.flows", "flownb.core"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_isinstance_check_finds_a_flow_class() -> None:
    tree = ast.parse("ok = isinstance(flow, (LocalFlow, str)) or isinstance(f, local.LocalCore)")
    assert set(_isinstance_names(tree)) >= {"LocalFlow", "LocalCore"}


def _string_keyed_registries(tree: ast.Module) -> Iterator[str]:
    """Subscripts of a module-level name by a string constant that names a function looked
    up at run time (``HOOKS["preview"](...)``), and ``X.register("name", f)`` calls."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Subscript)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id.isupper()
            and isinstance(node.func.slice, ast.Constant)
            and isinstance(node.func.slice.value, str)
        ):
            yield f"{node.func.value.id}[{node.func.slice.value!r}](...)"
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "register"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id.isupper()
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            yield f"{node.func.value.id}.register({node.args[0].value!r}, ...)"


def test_no_string_keyed_feature_registry() -> None:
    # A feature is imported by what opens it; none is looked up by name at run time.
    found = {name: sorted(set(_string_keyed_registries(tree))) for name, tree in modules().items()}
    assert {k: v for k, v in found.items() if v} == {}
    assert not (PACKAGE / "wiring.py").exists()
    assert not (PACKAGE / "runtime" / "hooks.py").exists()


def test_the_registry_check_finds_a_registry() -> None:
    tree = ast.parse('HOOKS.register("form", f)\nHOOKS["preview"](flow, data)')
    assert len(set(_string_keyed_registries(tree))) == 2


def test_errors_is_the_ground_floor() -> None:
    assert import_graph()["flownb.errors"] == set()


def test_the_core_never_imports_notebook_code() -> None:
    graph = import_graph()
    offenders = {
        name: sorted(t for t in targets if t.startswith("flownb.notebook"))
        for name, targets in graph.items()
        if not name.startswith("flownb.notebook") and name not in NOT_CORE
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def _calls(tree: ast.Module, func: str) -> bool:
    return any(
        isinstance(n, ast.Call)
        and (
            (isinstance(n.func, ast.Name) and n.func.id == func)
            or (isinstance(n.func, ast.Attribute) and n.func.attr == func)
        )
        for n in ast.walk(tree)
    )


def test_settings_are_resolved_once_per_surface() -> None:
    mods = modules()
    readers = {name for name, tree in mods.items() if _calls(tree, "get_settings")}
    assert readers == {"flownb.config.settings"}
    builders = {name for name, tree in mods.items() if _calls(tree, "resolve_run_config")}
    assert builders == SURFACES, builders ^ SURFACES
    text = {p: p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")}
    assert [p.name for p, t in text.items() if "os.environ" in t] == ["settings.py"]


# Private attributes touched on something other than self/cls, each with its reason.
PRIVATE_ALLOWED = {
    # make_result fills a RunResult it made with dict.__new__ (the engine's per-row fast path).
    ("flownb.runtime.result", "_entries"),
    ("flownb.runtime.result", "_trace_of"),
    ("flownb.runtime.result", "_plan"),  # the plan a run's picture draws (RunResult.to_svg)
    ("flownb.runtime.result", "_inputs"),  # the run's variables, drawn on that picture
    # ... and sets (or, unpickling, restores) the cost it computes lazily.
    ("flownb.runtime.result", "_costs"),
    # Dask's own name for a frame's empty, typed schema (what map_partitions' meta= expects).
    ("flownb.frames.dask.run", "_meta"),
    # An endpoint's copies and unpickled twins take over where its key is held (in memory
    # only); the holder never leaves flownb.config.endpoints.
    ("flownb.config.endpoints", "_held"),
    # ... and whether its base URL is the one the environment pairs with its key variable.
    ("flownb.config.endpoints", "_env_paired"),
    # ... and whether its base URL is the one the environment pairs with its key variable.
    ("flownb.config.endpoints", "_env_paired"),
}


def test_no_private_member_is_used_across_objects() -> None:
    offenders = []
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            attr = node.attr
            if not attr.startswith("_") or attr.startswith("__") or attr.endswith("_"):
                continue  # public, dunder, or a protocol name such as _repr_html_
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if (name, attr) not in PRIVATE_ALLOWED:
                offenders.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    assert offenders == []


def test_providers_are_chosen_from_the_registry_everywhere() -> None:
    # The CLI's and the magics' choices derive from the registry, not from a literal list.
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.List | ast.Tuple) and {
                c.value for c in node.elts if isinstance(c, ast.Constant)
            } >= {"offline", "openai"}:
                raise AssertionError(f"{name}:{node.lineno} lists providers by hand")


def test_run_dataframe_options_are_written_once() -> None:
    # The public signature stays explicit (help(), IDE completion); what passes through the
    # doors behind it is frames.options.DataFrameOptions, so the two must name the same options.
    import inspect

    from flownb import BaseFlow
    from flownb.frames.options import DataFrameOptions, FrameOptions

    public = inspect.signature(BaseFlow.run_dataframe).parameters
    keywords = {n for n, p in public.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert keywords == set(DataFrameOptions.__optional_keys__)
    assert set(FrameOptions.__optional_keys__) < keywords
    for name in ("flownb.frames.run", "flownb.frames.dask.run", "flownb.frames.batch_api.run"):
        tree = modules()[name]
        runners = [
            f
            for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef) and f.name.startswith("run_dataframe")
        ]
        assert runners, name
        for f in runners:
            written = {a.arg for a in f.args.kwonlyargs}
            assert not written & set(FrameOptions.__optional_keys__), (name, written)
