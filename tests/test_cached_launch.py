"""lowerings.cached_launch: the package's kernels launch through their launcher after their first
launch through ``CachingAutotuner.run`` (torch 2.11); other kernels through ``run``."""

from __future__ import annotations

import copy
import pickle
import types
from unittest import mock

import torch
import torch.nn.functional as F
from torch._inductor.runtime.triton_heuristics import CachingAutotuner
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase

from lowerings import cached_launch, package_kernels, static_launch


def _launcher(launched, store_cubin=False):
    def launcher(*args, stream):
        launched.append(("launcher", args, stream))

    launcher.store_cubin = store_cubin
    launcher.config = types.SimpleNamespace(found_by_coordesc=False)
    return launcher


def test_launcher_alone_only_where_run_would_only_launch():
    launcher = _launcher([])
    assert cached_launch.launcher_alone(types.SimpleNamespace(launchers=[launcher])) is launcher
    for launchers in ([], [launcher, launcher], [_launcher([], store_cubin=True)]):
        assert cached_launch.launcher_alone(types.SimpleNamespace(launchers=launchers)) is None
    for flag in ("dump_launch_params", "dump_launch_tensors", "triton_interpret"):
        assert cached_launch.launcher_alone(types.SimpleNamespace(launchers=[launcher], **{flag: True})) is None
    tuning = {"coordinate_descent_tuning": True}
    assert cached_launch.launcher_alone(types.SimpleNamespace(launchers=[launcher], inductor_meta=tuning)) is None
    launcher.config.found_by_coordesc = True
    assert cached_launch.launcher_alone(types.SimpleNamespace(launchers=[launcher], inductor_meta=tuning)) is launcher


class Kernel:
    """Stands for ``CachingAutotuner``: ``run`` launches its one launcher; its state pickles
    only without launchers."""

    def __init__(self, launched):
        self.launched = launched
        self.launchers = [_launcher(launched)]

    def run(self, *args, stream, **kwargs):
        self.launched.append(("run", args, stream))
        self.launchers[0](*args, stream=stream)

    def __getstate__(self):
        assert not self.launchers
        return {k: v for k, v in vars(self).items() if k != "launched"}


def _cached(kernel):
    kernel._decomps_launch = None
    kernel.__class__ = cached_launch.launch_class(type(kernel))
    return kernel


def test_run_once_then_the_launcher():
    launched = []
    kernel = _cached(Kernel(launched))
    for _ in range(3):
        kernel.run("in", "out", 7, stream=5)
    assert [kind for kind, *_ in launched] == ["run", "launcher", "launcher", "launcher"]
    assert all(tuple(rest) == (("in", "out", 7), 5) for _, *rest in launched)


def test_through_run_under_the_profiler_with_keywords_or_new_launchers():
    launched = []
    kernel = _cached(Kernel(launched))
    kernel.run(1, stream=0)
    with torch.autograd.profiler.profile():
        kernel.run(1, stream=0)
    kernel.run(1, stream=0, benchmark_run=True)
    kernel.launchers = [_launcher(launched)]  # e.g. precompiled again
    kernel.run(1, stream=0)
    kernel.run(1, stream=0)
    runs = [kind for kind, *_ in launched if kind == "run"]
    assert len(runs) == 4 and len(launched) == 9  # the last call alone skipped run


def test_copies_and_pickles_are_stock_kernels():
    kernel = _cached(Kernel([]))
    kernel.launchers = []  # Inductor empties them before it copies (prepare_for_pickle)
    for copied in (copy.deepcopy(kernel), pickle.loads(pickle.dumps(kernel))):
        assert type(copied) is Kernel and not hasattr(copied, "_decomps_launch")


def _tuner(meta=None, source="def k(x):\n    pass\n"):
    from torch._inductor.runtime.hints import HeuristicType

    tuner = CachingAutotuner.__new__(CachingAutotuner)
    tuner.inductor_meta = dict(meta or {})
    tuner.heuristic_type = HeuristicType.POINTWISE
    tuner.fn = types.SimpleNamespace(src=source)
    tuner.launchers = [_launcher([])]
    return tuner


def test_precompile_gives_package_kernels_the_cached_launch(monkeypatch):
    monkeypatch.setattr(cached_launch, "_stock", {"precompile": lambda self, *args, **kwargs: "precompiled"})
    monkeypatch.setattr(static_launch, "is_package_kernel", lambda tuner: tuner.fn.src == "repeat_rows")
    marked, repeat, other = _tuner({package_kernels.PACKAGE: True}), _tuner(source="repeat_rows"), _tuner()
    for tuner in (marked, repeat, other):
        assert cached_launch.precompile(tuner) == "precompiled"
    assert type(marked) is type(repeat) is cached_launch.launch_class(CachingAutotuner)
    assert marked._decomps_launch is None and type(other) is CachingAutotuner
    # a kernel that precompile left with another class (size variants) keeps it
    variants = type("Variants", (CachingAutotuner,), {})
    kept = _tuner({package_kernels.PACKAGE: True})
    kept.__class__ = variants
    cached_launch.precompile(kept)
    assert type(kept) is variants
    # nothing loaded yet (a compile worker's warm-up): nothing to launch
    empty = _tuner({package_kernels.PACKAGE: True})
    empty.launchers = []
    cached_launch.precompile(empty)
    assert type(empty) is CachingAutotuner


def test_checked_torch_versions_only(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.13.0")  # caches launchers itself
    assert cached_launch.missing_hooks()[0].startswith("torch 2.13")
    assert cached_launch.install()() is None  # nothing installed, nothing to undo


def test_install_and_undo(monkeypatch):
    stock = CachingAutotuner.__dict__["precompile"]
    monkeypatch.setattr(cached_launch, "_stock", {})
    monkeypatch.setattr(cached_launch, "missing_hooks", lambda: [])
    undo = cached_launch.install()
    assert CachingAutotuner.precompile is cached_launch.precompile and cached_launch._stock["precompile"] is stock
    undo()
    assert CachingAutotuner.__dict__["precompile"] is stock


def _loaded_kernels(codes) -> dict:
    """The Triton kernels (``CachingAutotuner``) of the generated modules whose source is in
    ``codes``, by name."""
    from torch._inductor.codecache import PyCodeCache

    kernels = {}
    for module in [*PyCodeCache.modules, *PyCodeCache.modules_no_attr.values()]:
        for name, value in vars(module).items():
            if isinstance(value, CachingAutotuner) and any(f"{name}.run(" in code for code in codes):
                kernels[name] = value
    return kernels


class TestCachedLaunch(TestCase):
    """Compiled on CUDA with torch 2.11: the package's kernels (generated and its own Triton
    repeat) skip ``run`` after their first launch, other kernels of the graph do not, and the
    results stay eager's."""

    def _check(self, f, inputs, dynamic):
        from torch._inductor.utils import fresh_inductor_cache, run_and_get_code

        torch._dynamo.reset()
        c = torch.compile(f, dynamic=dynamic)
        # a fresh cache holds only this graph's modules, where kernel names repeat across graphs
        with fresh_inductor_cache():
            _, codes = run_and_get_code(c, *inputs)
            kernels = _loaded_kernels(codes)
        runs = []
        stock_run = CachingAutotuner.run

        def counted(self, *args, **kwargs):
            runs.append(self)
            return stock_run(self, *args, **kwargs)

        with mock.patch.object(CachingAutotuner, "run", counted):
            for _ in range(3):
                for got, expected in zip(c(*inputs), f(*inputs)):
                    self.assertEqual(got, expected, atol=0, rtol=0)
                    self.assertEqual(got.stride(), expected.stride())
        return kernels, runs

    def test_package_kernels_skip_run(self, device):
        """Where this torch caches launchers itself (2.13 and later) nothing is installed and
        every kernel launches through ``run``."""
        installed = not cached_launch.missing_hooks()
        launch_class = cached_launch.launch_class(CachingAutotuner)
        cases = [
            # the package's Triton repeat: a user-defined kernel of the generated code
            (lambda x: (F.interpolate(x, scale_factor=2, mode="nearest"), x.sin()),
             (torch.randn(2, 8, 16, 32, device=device, dtype=torch.bfloat16),)),
            # a generated gather with a fused add
            (lambda x, y: (F.interpolate(x, scale_factor=1.5, mode="nearest-exact") + y, x.cos()),
             (torch.randn(2, 4, 10, 12, device=device), torch.randn(2, 4, 15, 18, device=device))),
        ]
        for f, inputs in cases:
            for dynamic in (False, True):
                kernels, runs = self._check(f, inputs, dynamic)
                package = {name for name, k in kernels.items() if cached_launch.is_package_kernel(k)}
                others = set(kernels) - package
                self.assertTrue(package and others, (sorted(kernels), dynamic))
                for name in others:  # x.sin(), x.cos(): through run every time
                    self.assertNotIsInstance(kernels[name], launch_class)
                    self.assertEqual(sum(k is kernels[name] for k in runs), 3, name)
                # with dynamic sizes a generated kernel launches its size variants instead
                cached = {name for name in package if type(kernels[name]) is launch_class}
                if not installed:
                    self.assertEqual(cached, set())
                elif not dynamic or any(static_launch.is_package_kernel(kernels[n]) for n in package):
                    self.assertTrue(cached, (sorted(package), dynamic))
                for name in cached:
                    self.assertIsNotNone(kernels[name]._decomps_launch, name)
                    self.assertNotIn(kernels[name], runs, name)
                if not dynamic and installed:
                    self.assertEqual(cached, package)


instantiate_device_type_tests(TestCachedLaunch, globals(), only_for=("cuda",))
