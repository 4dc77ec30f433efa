"""lowerings.static_launch: the package's Triton kernels launch through Inductor's static
launcher; other user-defined Triton kernels as before."""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from torch._inductor import config
from torch._inductor.runtime import triton_heuristics
from torch._inductor.runtime.hints import HeuristicType
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase

from lowerings import static_launch

KERNEL = "def kernel(in_ptr, out_ptr, n):\n    i = tl.program_id(0)\n    tl.store(out_ptr + i, tl.load(in_ptr + i))\n"


def _autotuner(source=KERNEL, heuristic=HeuristicType.USER_AUTOTUNE, results=()):
    return types.SimpleNamespace(fn=types.SimpleNamespace(src=source), heuristic_type=heuristic,
                                 compile_results=list(results), inductor_meta={"kernel_name": "kernel_0"},
                                 triton_meta={"device_type": "cuda"})


def test_a_kernel_is_the_package_s_by_its_source(monkeypatch):
    monkeypatch.setattr(static_launch, "package_sources", lambda: frozenset({static_launch._normalized(KERNEL)}))
    # as Inductor copies it: re-indented, renamed under triton.unique_user_kernel_names
    copied = KERNEL.replace("def kernel(", "def kernel_0(").replace("    ", "        ")
    assert static_launch.is_package_kernel(_autotuner(copied))
    assert not static_launch.is_package_kernel(_autotuner(KERNEL.replace("out_ptr + i", "out_ptr + 2 * i")))
    assert not static_launch.is_package_kernel(_autotuner(heuristic=HeuristicType.POINTWISE))
    assert not static_launch.is_package_kernel(types.SimpleNamespace(heuristic_type=HeuristicType.USER_AUTOTUNE))


def _result(kind, name):
    return kind(kernel=name, config=f"{name} config", compile_meta={"name": name}, inductor_meta={})


def test_results_launch_statically_where_inductors_test_passes(monkeypatch):
    seen = []

    def can_statically_launch(kernel, inductor_meta, triton_meta, heuristic_type):
        seen.append((kernel, config.static_launch_user_defined_triton_kernels, heuristic_type))
        return f"{kernel} launcher" if kernel != "declined" else None

    monkeypatch.setattr(triton_heuristics.StaticTritonCompileResult, "can_statically_launch",
                        staticmethod(can_statically_launch))
    static = _result(triton_heuristics.StaticTritonCompileResult, "static")
    tuner = _autotuner(results=[_result(triton_heuristics.TritonCompileResult, "a"), static,
                                _result(triton_heuristics.TritonCompileResult, "declined")])
    static_launch.launch_statically(tuner)
    first, second, third = tuner.compile_results
    assert type(first) is triton_heuristics.StaticTritonCompileResult
    assert (first.kernel, first.config, first.compile_meta) == ("a launcher", "a config", {"name": "a"})
    assert first.inductor_meta is tuner.inductor_meta
    assert second is static and type(third) is triton_heuristics.TritonCompileResult
    # Inductor's test, with the switch for user-defined kernels on for it alone
    assert seen == [("a", True, HeuristicType.USER_AUTOTUNE), ("declined", True, HeuristicType.USER_AUTOTUNE)]
    assert config.static_launch_user_defined_triton_kernels is False


def test_a_result_the_test_cannot_read_keeps_tritons_launcher(monkeypatch, caplog):
    def can_statically_launch(kernel, inductor_meta, triton_meta, heuristic_type):
        raise AttributeError("'NoneType' object has no attribute 'fn'")

    monkeypatch.setattr(triton_heuristics.StaticTritonCompileResult, "can_statically_launch",
                        staticmethod(can_statically_launch))
    result = _result(triton_heuristics.TritonCompileResult, "a")
    tuner = _autotuner(results=[result])
    static_launch.launch_statically(tuner)
    assert tuner.compile_results == [result]
    assert "kernel_0 keeps Triton's launcher" in caplog.text
    assert config.static_launch_user_defined_triton_kernels is False


def test_only_package_kernels_change_after_inductor_compiles(monkeypatch):
    compiled, converted = [], []
    monkeypatch.setattr(static_launch, "_stock", {"_precompile_worker": lambda self: compiled.append(self)})
    monkeypatch.setattr(static_launch, "launch_statically", converted.append)
    monkeypatch.setattr(static_launch, "package_sources", lambda: frozenset({static_launch._normalized(KERNEL)}))
    mine, other, empty = _autotuner(results=["r"]), _autotuner("def other():\n    pass\n", results=["r"]), _autotuner()
    for tuner in (mine, other, empty):
        static_launch._precompile_worker(tuner)
    assert compiled == [mine, other, empty] and converted == [mine]


def test_checked_torch_versions_only(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    assert static_launch.missing_hooks()[0].startswith("torch 2.99")
    assert static_launch.install()() is None  # nothing installed, nothing to undo


def test_install_and_exact_undo(monkeypatch):
    autotuner = triton_heuristics.CachingAutotuner
    before = autotuner.__dict__["_precompile_worker"]
    monkeypatch.setattr(static_launch, "_stock", {})
    monkeypatch.setattr(static_launch, "missing_hooks", lambda: [])
    undo = static_launch.install()
    assert autotuner.__dict__["_precompile_worker"] is static_launch._precompile_worker
    assert static_launch._stock["_precompile_worker"] is before
    undo()
    assert autotuner.__dict__["_precompile_worker"] is before


def test_hooks_of_this_torch():
    missing = static_launch.missing_hooks()
    from torch.utils._triton import has_triton

    assert missing == ([] if has_triton() else ["triton"])


def _loaded_autotuners():
    from torch._inductor.codecache import PyCodeCache

    modules = [*PyCodeCache.modules, *PyCodeCache.modules_no_attr.values()]
    return {name: value for module in modules for name, value in vars(module).items()
            if isinstance(value, triton_heuristics.CachingAutotuner)}


def _add_one_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(in_ptr, out_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + i, tl.load(in_ptr + i, i < n) + 1, i < n)

    return add_one


class TestStaticLaunch(TestCase):
    """Compiled on CUDA: the package's kernels launch statically and stay exact, compiled in
    this process or in a compile worker; a user's own Triton kernel keeps Triton's launcher."""

    def _check(self, device, *, worker: bool):
        from torch._functorch import config as functorch_config
        from torch._inductor.async_compile import AsyncCompile
        from torch._inductor.utils import fresh_cache

        add_one = _add_one_kernel()

        def forward(x):
            z = torch.empty_like(x)
            add_one[((x.numel() + 255) // 256,)](x, z, x.numel(), BLOCK=256)
            return F.interpolate(x, scale_factor=2, mode="nearest"), z

        def step(forward):
            y, z = forward(x)
            return y, z, torch.autograd.grad(y, x, g)[0]

        x = torch.randn(2, 3, 20, 24, device=device, requires_grad=True)
        g = torch.randn(2, 3, 40, 48, device=device)
        torch._dynamo.reset()
        # A fresh cache also gives the compile workers this process's Triton cache directory,
        # where the package looks for their binaries (a worker keeps the directory it was last
        # given: one an earlier test's fresh cache set and removed).
        with fresh_cache(), config.patch(fx_graph_cache=False, compile_threads=2 if worker else 1), \
                functorch_config.patch(enable_autograd_cache=False):
            if worker:
                AsyncCompile.use_process_pool()
                AsyncCompile.wait_pool_ready()
                self.assertTrue(AsyncCompile.use_process_pool())
            actual = step(torch.compile(forward))
            tuners = {n: t for n, t in _loaded_autotuners().items() if t.launchers}  # those launched
        for a, e in zip(actual, step(forward)):
            self.assertTrue(torch.equal(a, e))
        package = {n: t for n, t in tuners.items() if static_launch.is_package_kernel(t)}
        self.assertEqual({t.fn.__name__ for t in package.values()}, {"repeat_rows", "window_sum_rows"})
        for name, tuner in tuners.items():
            static = bool(tuner.launchers) and all(getattr(la, "_is_static", False) for la in tuner.launchers)
            self.assertEqual(static, name in package or tuner.heuristic_type != HeuristicType.USER_AUTOTUNE, name)
            if worker and name in package:
                self.assertIsNotNone(getattr(tuner, "_reload_kernel", None), name)  # compiled in a worker
        self.assertIn("add_one", {t.fn.__name__ for t in tuners.values()})

    def test_package_kernels_compiled_here(self, device):
        self._check(device, worker=False)

    def test_package_kernels_compiled_in_a_worker(self, device):
        self._check(device, worker=True)


instantiate_device_type_tests(TestStaticLaunch, globals(), only_for=("cuda",))
