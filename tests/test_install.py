"""Installation: reroutes autograd and Inductor, and undoes it exactly, caches included."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.common_utils import TestCase, run_tests

import decomps
from decomps import ops
from tests.test_compile import INDIRECT_LOAD

aten = torch.ops.aten


def _joint_graph(fn, x):
    """ops in the forward+backward graph AOTAutograd traces, with the Python dispatcher on."""
    from functorch.compile import aot_function, make_boxed_func

    seen = []

    def compiler(gm, _):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return make_boxed_func(gm.forward)

    out = aot_function(fn, compiler, compiler)(x)
    out.sum().backward()
    return seen


def _train(x):
    return F.interpolate(x, scale_factor=2, mode="nearest") * 2


class TestInstall(TestCase):
    def tearDown(self):
        decomps.install()

    def test_import_installs(self):
        self.assertTrue(decomps.is_installed())

    def test_op_stays_whole_through_autograd(self):
        targets = _joint_graph(_train, torch.randn(1, 2, 3, 4, requires_grad=True))
        self.assertIn("aten.upsample_nearest2d.default", targets)
        self.assertIn("aten.upsample_nearest2d_backward.default", targets)
        self.assertFalse(any("index_put" in t or "_unsafe_index" in t for t in targets), targets)

    def test_uninstall_gives_back_stock_graphs(self):
        decomps.uninstall()
        self.assertFalse(decomps.is_installed())
        targets = _joint_graph(_train, torch.randn(1, 2, 3, 4, requires_grad=True))
        self.assertIn("aten._unsafe_index.Tensor", targets)
        self.assertTrue(any("index_put" in t for t in targets), targets)

    def test_disabled_scopes_stock_behaviour(self):
        with decomps.disabled():
            self.assertFalse(decomps.is_installed())
            targets = _joint_graph(_train, torch.randn(1, 2, 3, 4, requires_grad=True))
            self.assertIn("aten._unsafe_index.Tensor", targets)
        self.assertTrue(decomps.is_installed())

    def _stock_state(self):
        from torch._inductor import decomposition, lowering

        return (
            dict(decomposition.decompositions),
            dict(decomposition.select_decomp_table()),
            dict(lowering.lowerings),
            {op: dict(op.py_kernels) for op in ops.FORWARD_OVERLOADS + ops.BACKWARD_OVERLOADS},
            torch.compiler.config.cache_key_tag,
        )

    def test_install_twice_equals_once_and_uninstall_is_exact(self):
        installed = self._stock_state()
        self.assertTrue(decomps.install())
        self.assertEqual(self._stock_state(), installed)
        decomps.uninstall()
        stock = self._stock_state()
        decomps.uninstall()
        self.assertEqual(self._stock_state(), stock)
        decomps.install()
        self.assertEqual(self._stock_state(), installed)
        decomps.uninstall()
        self.assertEqual(self._stock_state(), stock)
        # Stock tables hold torch's own entries for our ops; ours replace exactly those.
        table = decomps.decomposition_table()
        for op in table:
            self.assertIsNot(stock[0].get(op), table[op])
            self.assertIs(installed[0][op], table[op])

    def test_decomposition_table_covers_the_family(self):
        table = decomps.decomposition_table()
        self.assertEqual(set(table), set(ops.FORWARD_OVERLOADS + ops.BACKWARD_OVERLOADS))
        self.assertEqual(len(table), 30)

    def test_compiled_graph_not_served_across_states_in_process(self):
        def fn(x):
            return F.interpolate(x, scale_factor=2, mode="nearest")

        x = torch.randn(2, 3, 8, 8)
        compiled = torch.compile(fn, backend="inductor")
        _, (ours, *_) = run_and_get_code(compiled, x)
        with decomps.disabled():
            _, (stock, *_) = run_and_get_code(compiled, x)
        _, (again, *_) = run_and_get_code(compiled, x)
        self.assertIsNone(INDIRECT_LOAD.search(ours))
        self.assertIsNotNone(INDIRECT_LOAD.search(stock))  # stock reads through a computed index
        self.assertIsNone(INDIRECT_LOAD.search(again))


_CACHE_PROBE = textwrap.dedent(
    """
    import sys, torch, torch.nn.functional as F
    from torch._inductor.utils import run_and_get_code
    import torch._inductor.config as ic, torch._functorch.config as fc
    ic.fx_graph_cache = True
    fc.enable_autograd_cache = True
    if sys.argv[1] == "stock":
        import decomps; decomps.uninstall()
    elif sys.argv[1] == "ours":
        import decomps
    def step(x):
        x = x.detach().requires_grad_()
        return torch.autograd.grad(F.interpolate(x, scale_factor=2, mode="nearest").sum(), x)[0]
    _, codes = run_and_get_code(torch.compile(step, backend="inductor"), torch.randn(2, 3, 8, 8))
    print("SCATTER" if any("atomic_add" in c for c in codes) else "GATHER")
    """
)


class TestOnDiskCaches(TestCase):
    def _run(self, state: str, cache_dir: str) -> str:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache_dir)
        result = subprocess.run(
            [sys.executable, "-c", _CACHE_PROBE, state],
            env=env, capture_output=True, text=True, timeout=600,
        )
        self.assertEqual(result.returncode, 0, msg=result.stderr[-3000:])
        return result.stdout.strip().splitlines()[-1]

    def test_fresh_processes_share_no_graphs_across_states(self):
        import tempfile

        with tempfile.TemporaryDirectory() as cache_dir:
            self.assertEqual(self._run("ours", cache_dir), "GATHER")
            self.assertEqual(self._run("stock", cache_dir), "SCATTER")
            self.assertEqual(self._run("ours", cache_dir), "GATHER")
            self.assertEqual(self._run("stock", cache_dir), "SCATTER")


if __name__ == "__main__":
    run_tests()
