"""No circle among the project's packages: a package's modules (`spoteval.clouds.*`, ...) taken as
one node, an import from one package to another is an edge, wherever it is written."""

from __future__ import annotations

from tests.test_layout import cycles, import_graph


def _package(module: str) -> str:
    """`spoteval.clouds.aws` -> `spoteval.clouds`; a top-level module (`spoteval.grant`) is its own."""
    return ".".join(module.split(".")[:2])


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        node = _package(module)
        graph.setdefault(node, set()).update(_package(t) for t in targets if _package(t) != node)
    return graph


def test_no_package_is_in_a_circle() -> None:
    """The control planes, the event readers, the offers, the vendor clients, the agent and the
    commands are in no circle: a node's status from the record (`spoteval.node_status`) sits below
    the operator and the report, so the placement's `--from-run` reads the run through the report,
    the report reads a node's status, and the operator asks the placement for the deadline rule,
    with no way back."""
    graph = package_graph()
    assert {"spoteval.clouds", "spoteval.events", "spoteval.apis", "spoteval.agent"} <= set(graph)
    assert cycles(graph) == []


def test_the_vendor_clients_import_no_other_package_of_the_project() -> None:
    """`spoteval.apis` sits below the agent, the planes, the readers and the offers: it reads the
    provider facts and nothing else of the project."""
    assert package_graph()["spoteval.apis"] <= {"spoteval.providers"}
