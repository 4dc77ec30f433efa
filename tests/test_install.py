"""Installation: reroutes autograd and Inductor, and undoes it exactly, caches included."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor.utils import fresh_cache, run_and_get_code
from torch.testing._internal.common_utils import TestCase, run_tests

import decomps
from decomps import ops
from tests.graphs import post_grad_graphs

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
        """Installed, disabled, installed: each state gets its own graphs, with the FX graph and
        AOTAutograd caches on (a fresh cache folder) and Dynamo's code cache in between."""
        compiled = torch.compile(_upsample_x2, backend="inductor")
        x = torch.randn(2, 3, 8, 8, requires_grad=True)

        def step():
            return torch.autograd.grad(compiled(x).sum(), x)

        runs = []
        # the caches on whatever an earlier test in this process left (a harness or probe run turns them off)
        with fresh_cache(), torch._inductor.config.patch(fx_graph_cache=True), \
                torch._functorch.config.patch(enable_autograd_cache=True):
            for state in ("installed", "disabled", "installed"):
                with contextlib.ExitStack() as stack:
                    if state == "disabled":
                        stack.enter_context(decomps.disabled())
                    graphs = stack.enter_context(post_grad_graphs(caches=True))
                    counters.clear()
                    _, codes = run_and_get_code(step)
                runs.append((graphs, dict(counters["aot_autograd"]), codes))
        (ours, ours_counts, ours_codes), (stock, stock_counts, _), (again, again_counts, again_codes) = runs
        # a forward and a backward graph compiled, neither reading nor writing through an index
        self.assertEqual(ours_counts.get("autograd_cache_miss"), 1)
        self.assertEqual(ours.gathers() + ours.scatters(), [set()] * 4)
        # disabled: compiled afresh (not served the graph above), stock's gather and scatter
        self.assertEqual(stock_counts.get("autograd_cache_miss"), 1)
        self.assertEqual(len(stock.graphs), 2)
        self.assertTrue(stock.gathers()[0] and stock.scatters()[1], (stock.gathers(), stock.scatters()))
        # installed again: the first graph, served from the cache
        self.assertEqual(again_counts.get("autograd_cache_hit"), 1, again_counts)
        self.assertEqual(again.graphs, [])
        self.assertEqual(again_codes, ours_codes)


def _upsample_x2(x):
    return F.interpolate(x, scale_factor=2, mode="nearest")


# One process: compiles a training step of _upsample_x2 with the FX graph and AOTAutograd caches
# on, and prints what it compiled (post-grad graphs) or was served (cache counters, code hash).
# argv[1]: "installed", "uninstalled" (imported, then uninstall()) or "never-imported".
_CACHE_PROBE = textwrap.dedent(
    """
    import hashlib, json, sys
    import torch, torch.nn.functional as F
    import torch._functorch.config as fc, torch._inductor.config as ic
    from torch._dynamo.utils import counters
    from torch._inductor.utils import run_and_get_code
    from tests.graphs import post_grad_graphs
    ic.fx_graph_cache = True
    fc.enable_autograd_cache = True
    if sys.argv[1] != "never-imported":
        import decomps
        if sys.argv[1] == "uninstalled":
            decomps.uninstall()
    compiled = torch.compile(lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), backend="inductor")
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    with post_grad_graphs(caches=True) as graphs:
        _, codes = run_and_get_code(lambda: torch.autograd.grad(compiled(x).sum(), x))
    print(json.dumps({
        "imported": "decomps" in sys.modules,
        "tag": torch.compiler.config.cache_key_tag,
        "hits": counters["aot_autograd"]["autograd_cache_hit"],
        "misses": counters["aot_autograd"]["autograd_cache_miss"],
        "gathers": [sorted(ops) for ops in graphs.gathers()],
        "scatters": [sorted(ops) for ops in graphs.scatters()],
        "code": hashlib.sha256("".join(codes).encode()).hexdigest() if codes else None,
    }))
    """
)


class TestOnDiskCaches(TestCase):
    def _run(self, state: str, cache_dir: str) -> dict:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache_dir)
        env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
        env.pop("TORCH_COMPILE_CACHE_KEY_TAG", None)
        result = subprocess.run(
            [sys.executable, "-c", _CACHE_PROBE, state],
            env=env, capture_output=True, text=True, timeout=600,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
        self.assertEqual(result.returncode, 0, msg=result.stderr[-3000:])
        return json.loads(result.stdout.strip().splitlines()[-1])

    def test_fresh_processes_share_no_graphs_across_states(self):
        """Five processes, one cache folder: each is compiled or served its own state's graphs."""
        with tempfile.TemporaryDirectory() as cache_dir:
            ours = self._run("installed", cache_dir)
            never = self._run("never-imported", cache_dir)
            uninstalled = self._run("uninstalled", cache_dir)
            ours_again = self._run("installed", cache_dir)
            never_again = self._run("never-imported", cache_dir)
        # compiled: a forward and a backward graph without a gather or a scatter
        self.assertEqual((ours["misses"], ours["hits"]), (1, 0), ours)
        self.assertEqual(ours["gathers"] + ours["scatters"], [[]] * 4, ours)
        # never imported: compiled afresh (not served the graphs above); stock gathers and scatters
        self.assertFalse(never["imported"])
        self.assertEqual((never["misses"], never["hits"]), (1, 0), never)
        self.assertTrue(never["gathers"][0] and never["scatters"][1], never)
        self.assertNotEqual(never["code"], ours["code"])
        # the other three are served from the cache, each its own state's code
        for run, expected in ((uninstalled, never), (ours_again, ours), (never_again, never)):
            self.assertEqual((run["misses"], run["hits"], run["gathers"]), (0, 1, []), run)
            self.assertEqual(run["code"], expected["code"])
        self.assertIn("+decomps-", ours["tag"])
        self.assertEqual([never["tag"], uninstalled["tag"]], ["", ""])


# Counts Inductor's builds of its ISA probe programs (``cpu_vec_isa.VecISA.check_build``) in a
# process with a fresh Inductor cache, after ``import decomps`` and after compiling ``argv[1]``.
_ISA_PROBE = textwrap.dedent(
    """
    import json, sys
    import torch
    import torch.nn.functional as F
    from torch._inductor import cpu_vec_isa

    built = []
    stock = cpu_vec_isa.VecISA.check_build
    cpu_vec_isa.VecISA.check_build = lambda self, code: built.append(self) or stock(self, code)
    import decomps
    assert decomps.is_installed()
    at_import = len(built)
    if sys.argv[1] == "cuda":
        # float32 channels-last of few channels: on CPU a choice that reads the vector width
        x = torch.randn(1, 3, 20, 30, device="cuda").to(memory_format=torch.channels_last)
        x.requires_grad_(True)
        fn = torch.compile(lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest"), dynamic=True)
        torch.autograd.grad(fn(x), x, torch.ones(1, 3, 30, 45, device="cuda"))
    print(json.dumps({"at_import": at_import, "after_compile": len(built)}))
    """
)


class TestImportCost(TestCase):
    """Picking Inductor's CPU ISA builds and loads a probe program per candidate (6.7 s of
    ``import decomps`` with a fresh cache on the CPU machine): it waits for a C++ kernel."""

    def _probe(self, device: str) -> dict:
        with tempfile.TemporaryDirectory() as cache_dir:
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache_dir)
            result = subprocess.run(
                [sys.executable, "-c", _ISA_PROBE, device], env=env, capture_output=True, text=True,
                timeout=600, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            )
        self.assertEqual(result.returncode, 0, msg=result.stderr[-3000:])
        return json.loads(result.stdout.strip().splitlines()[-1])

    def test_import_picks_no_cpu_isa(self):
        self.assertEqual(self._probe("none"), {"at_import": 0, "after_compile": 0})

    if torch.cuda.is_available():

        def test_cuda_compile_picks_no_cpu_isa(self):
            self.assertEqual(self._probe("cuda"), {"at_import": 0, "after_compile": 0})


if __name__ == "__main__":
    run_tests()
