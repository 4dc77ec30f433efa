"""What Inductor compiled: the post-grad FX graphs, recorded by a custom pass.

Evidence about scatters and gathers comes from these graphs (the ops Inductor lowers), not from
one backend's generated text. This module does not import ``decomps``, so a process that must
never install the package (tests/test_install.py) can use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

# Ops that write through an index tensor (accumulating or not), and ops that read through one:
# overload packet names, as in ``aten.<name>.<overload>``.
SCATTER_OPS = frozenset({
    "index_put", "index_put_", "_unsafe_index_put", "_index_put_impl_", "index_put_by_maps", "index_add", "index_add_",
    "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_",
})
GATHER_OPS = frozenset({"index", "_unsafe_index", "gather", "index_select", "index_by_maps", "gather_window_starts"})
# Scatters that always add into their target; the index_put family adds where ``accumulate``.
ADDING_SCATTER_OPS = frozenset({"index_add", "index_add_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_"})
INDEX_PUT_OPS = frozenset({"index_put", "index_put_", "_unsafe_index_put", "_index_put_impl_", "index_put_by_maps"})


def op_names(targets) -> set[str]:
    """Overload packet names of the ``OpOverload`` targets among ``targets``."""
    return {t.overloadpacket.__name__ for t in targets if isinstance(t, torch._ops.OpOverload)}


def _accumulates(node: torch.fx.Node, name: str) -> bool:
    if name in INDEX_PUT_OPS:
        return bool(node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False))
    return name in ADDING_SCATTER_OPS


class PostGradGraphs(CustomGraphPass):
    """Inductor's last post-grad pass: records the call targets of each graph it compiles.

    One graph per compile: a forward, a backward, an inference graph. A graph served from the
    FX graph or AOTAutograd cache is not compiled and so not recorded. The fixed ``uuid`` keeps
    those caches on (a pass without one bypasses them).
    """

    def __init__(self) -> None:
        self.graphs: list[list] = []
        self.accumulating: list[set[str]] = []

    def __call__(self, graph: torch.fx.Graph) -> None:
        nodes = [n for n in graph.nodes if n.op == "call_function"]
        self.graphs.append([n.target for n in nodes])
        self.accumulating.append({name for n in nodes for name in op_names([n.target]) if _accumulates(n, name)})

    def uuid(self) -> str:
        return "decomps-tests-post-grad-graphs"

    def scatters(self) -> list[set[str]]:
        """Per graph, the scatter ops it holds."""
        return [op_names(g) & SCATTER_OPS for g in self.graphs]

    def accumulating_scatters(self) -> list[set[str]]:
        """Per graph, the scatter ops it holds that add into their target (an ``index_put``
        with ``accumulate=True``, a ``scatter_add``, ...): what a plain store is not."""
        return list(self.accumulating)

    def gathers(self) -> list[set[str]]:
        """Per graph, the gather ops it holds."""
        return [op_names(g) & GATHER_OPS for g in self.graphs]


@contextlib.contextmanager
def post_grad_graphs(caches: bool = False) -> Iterator[PostGradGraphs]:
    """Records the post-grad graphs Inductor compiles inside the block.

    ``caches=False`` turns the FX graph and AOTAutograd caches off, so every graph is compiled
    (and recorded) rather than served. The config is per thread from torch 2.13 on; autograd
    hands it to the threads that run a backward (and may compile it lazily).
    """
    recorder = PostGradGraphs()
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch._inductor.config.patch(post_grad_custom_post_pass=recorder))
        if not caches:
            stack.enter_context(torch._inductor.config.patch(fx_graph_cache=False))
            stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
        yield recorder
