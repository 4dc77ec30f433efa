"""lowerings.size_variants: per-size variants of the package's dynamic Triton kernels."""

from __future__ import annotations

import types

import sympy
import torch
import torch.nn.functional as F
from torch._inductor.codegen.common import SizeArg
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase

from lowerings import package_kernels, size_variants

s0 = sympy.Symbol("s0", integer=True, positive=True)
SIGNATURE = {"in_ptr0": "*fp16", "out_ptr0": "*fp16", "ks0": "i32", "ks1": "i32", "xnumel": "i32", "XBLOCK": "constexpr"}
SOURCE = "def k(in_ptr0, out_ptr0, ks0, ks1, xnumel, XBLOCK):\n    x = tl.broadcast_to(ks1, [XBLOCK])\n"


def test_symbolic_size_args():
    args = [SizeArg("ks0", 2 * s0), SizeArg("ks1", sympy.Integer(300)), SizeArg("xnumel", 64 * s0),
            SizeArg("ks2", 3 * s0)]
    signature = {"ks0": "i32", "ks1": "i32", "xnumel": "i32", "ks2": "i64"}
    assert package_kernels.symbolic_size_args(args, signature) == ["ks0", "xnumel"]


def test_constant_names_keep_broadcast_values_as_arguments():
    assert size_variants.constant_names(["ks0", "ks1", "xnumel"], SOURCE) == ("ks0", "xnumel")
    assert size_variants.constant_names(["ks1"], SOURCE) == ()


def test_constant_names_keep_arguments_of_broadcast_expressions():
    # the position table of a 3d nearest-exact x1.5 backward (torch 2.11)
    source = ("    tmp15 = triton_helpers.maximum(tmp13, tmp14)\n"
              "    tmp16 = tl.broadcast_to((3*ks0) // 2, [XBLOCK])\n"
              "    tmp17 = tl.broadcast_to(triton_helpers.minimum(ks2, ks3), [XBLOCK, YBLOCK])\n")
    assert size_variants.constant_names(["ks0", "ks1", "ks2", "ks3", "ks10"], source) == ("ks1", "ks10")


def test_constant_meta():
    meta = {"signature": SIGNATURE, "constants": {"ks9": 1}, "configs": [{(0,): [["tt.divisibility", 16]],
                                                                        (2,): [["tt.divisibility", 16]]}]}
    constant = size_variants._constant_meta(meta, {"ks0": 48, "xnumel": 4096})
    assert constant["signature"] == {**SIGNATURE, "ks0": "constexpr", "xnumel": "constexpr"}
    assert constant["constants"] == {"ks9": 1, "ks0": 48, "xnumel": 4096}
    assert constant["configs"] == [{(0,): [["tt.divisibility", 16]]}]  # none on a constant
    assert meta["signature"] == SIGNATURE and meta["constants"] == {"ks9": 1}  # not mutated


def _tuner(names=("ks0", "ks1", "xnumel"), launchers=1):
    return types.SimpleNamespace(
        inductor_meta={size_variants.SIZE_ARGS: list(names)}, triton_meta={"signature": SIGNATURE},
        fn=types.SimpleNamespace(src=SOURCE, __name__="k"), launchers=[object()] * launchers)


def _with_variants(kernel):
    """``kernel`` (an instance of a stand-in class) as ``precompile`` leaves a package kernel."""
    tuner = _tuner()
    kernel.__dict__.update(vars(tuner))
    kernel._decomps_sizes = size_variants._Sizes(tuner)
    kernel.__class__ = size_variants._variant_class(type(kernel))
    return kernel


def test_variant_after_specialize_at_launches(monkeypatch):
    compiled = []
    monkeypatch.setattr(size_variants, "compile_variant", lambda t, values, configs: compiled.append(values) or object())
    tuner = _tuner()
    sizes = size_variants._Sizes(tuner)
    assert sizes.names == ("ks0", "xnumel") and sizes.positions == (2, 3, 4)  # keyed by every size
    for _ in range(size_variants.SPECIALIZE_AT - 1):
        sizes.seen(tuner, (48, 7, 4096), (), 0)
    assert compiled == [] and not sizes.variants
    sizes.seen(tuner, (48, 7, 4096), (), 0)
    assert compiled == [{"ks0": 48, "xnumel": 4096}] and list(sizes.variants) == [(48, 7, 4096)]


def _launcher(config):
    return types.SimpleNamespace(config=config)


def test_candidate_configs_of_1d_pointwise_kernels():
    from torch._inductor.runtime.hints import HeuristicType

    def tuner(heuristic, configs, signature=SIGNATURE):
        return types.SimpleNamespace(heuristic_type=heuristic, triton_meta={"signature": signature},
                                     launchers=[_launcher(c) for c in configs])

    assert size_variants.candidate_configs(tuner(HeuristicType.POINTWISE, ["a", "b"])) == ["a", "b"]
    assert size_variants.candidate_configs(tuner(HeuristicType.POINTWISE, ["a"])) == []  # nothing to tune
    assert size_variants.candidate_configs(tuner(HeuristicType.REDUCTION, ["a", "b"])) == []
    assert size_variants.candidate_configs(tuner(HeuristicType.POINTWISE, ["a", "b"], TILED)) == []
    assert size_variants.candidate_configs(types.SimpleNamespace()) == []  # not an Inductor kernel


def test_variants_of_1d_pointwise_kernels_are_tuned_over_the_kernels_candidates(monkeypatch):
    from torch._inductor.runtime.hints import HeuristicType

    compiled = []
    monkeypatch.setattr(size_variants, "compile_variant",
                        lambda t, values, configs: compiled.append(configs) or object())
    tuner = _tuner()
    tuner.heuristic_type = HeuristicType.POINTWISE
    tuner.launchers = [_launcher("1024 / 4 warps"), _launcher("512 / 8 warps")]
    sizes = size_variants._Sizes(tuner)  # read while the kernel holds every configuration
    tuner.launchers = tuner.launchers[1:]  # autotuned
    for _ in range(size_variants.SPECIALIZE_AT):
        sizes.seen(tuner, (48, 7, 4096), (), 0)
    assert compiled == [["1024 / 4 warps", "512 / 8 warps"]]


def test_at_most_max_variants(monkeypatch):
    monkeypatch.setattr(size_variants, "compile_variant", lambda t, values, configs: object())
    tuner = _tuner()
    sizes = size_variants._Sizes(tuner)
    for n in range(size_variants.MAX_VARIANTS + 3):
        for _ in range(size_variants.SPECIALIZE_AT):
            sizes.seen(tuner, (n, 7, 4096), (), 0)
    assert list(sizes.variants) == [(n, 7, 4096) for n in range(size_variants.MAX_VARIANTS)]


def test_no_variant_before_autotuning_or_while_capturing(monkeypatch):
    monkeypatch.setattr(size_variants, "compile_variant", lambda t, values, configs: object())
    untuned = _tuner(launchers=3)
    sizes = size_variants._Sizes(untuned)
    for _ in range(size_variants.SPECIALIZE_AT):
        sizes.seen(untuned, (1, 2, 3), (), 0)
    assert not sizes.variants
    monkeypatch.setattr(size_variants, "_capturing", lambda: True)
    tuner = _tuner()
    sizes = size_variants._Sizes(tuner)
    for _ in range(size_variants.SPECIALIZE_AT + 2):
        sizes.seen(tuner, (1, 2, 3), (), 0)
    assert not sizes.variants


def test_a_failed_variant_turns_the_kernel_off(monkeypatch):
    calls = []

    def fail(tuner, values, configs):
        calls.append(values)
        raise RuntimeError("triton")

    monkeypatch.setattr(size_variants, "compile_variant", fail)
    tuner = _tuner()
    sizes = size_variants._Sizes(tuner)
    for n in range(3):
        for _ in range(size_variants.SPECIALIZE_AT):
            sizes.seen(tuner, (n, 7, 4096), (), 0)
    assert len(calls) == 1 and not sizes.variants
    assert size_variants._Sizes(_tuner(names=("ks1",))).off  # nothing to specialize


class Tunable:
    """Stands for a variant's ``CachingAutotuner``: autotunes to one launcher."""

    def __init__(self, launchers, fails=False):
        self.launchers, self.fails, self.tuned_on = launchers, fails, []
        self.fn = types.SimpleNamespace(__name__="k")

    def autotune_to_one_config(self, *args):
        if self.fails:
            raise RuntimeError("out of resources")
        self.tuned_on.append(args)
        self.launchers = self.launchers[:1]


def test_under_cuda_graphs_a_variant_is_compiled_and_tuned_at_the_warm_up(monkeypatch):
    launcher = types.SimpleNamespace(store_cubin=False)
    variants = [Tunable([launcher, object()]), Tunable([object(), object()], fails=True)]
    monkeypatch.setattr(size_variants, "compile_variant", lambda t, values, configs: variants.pop(0))
    tuner = _tuner()
    tuner.inductor_meta[size_variants.CUDA_GRAPHS] = True
    sizes = size_variants._Sizes(tuner)
    args = ("in", "out", 48, 7, 4096)
    sizes.seen(tuner, (48, 7, 4096), args, 0)  # the first launch: the capture comes next
    (variant,) = sizes.variants.values()
    assert variant.tuned_on == [args] and sizes.launches == {(48, 7, 4096): launcher}
    sizes.seen(tuner, (50, 7, 4096), args, 0)  # tuning failed: the dynamic kernel is captured
    assert list(sizes.variants) == [(48, 7, 4096)] and not sizes.off
    assert size_variants._Sizes(_tuner()).specialize_at == size_variants.SPECIALIZE_AT > 1


def test_run_launches_the_variant_of_its_sizes(monkeypatch):
    """Through its ``run`` at its first launch (which autotunes it) and under the profiler,
    directly through its launcher otherwise."""
    launched = []

    def launcher(*args, stream):
        launched.append(("direct", args))

    launcher.store_cubin = False

    class Base:
        def run(self, *args, stream, **kwargs):
            launched.append(("dynamic", args))

    class Variant:
        launchers = [launcher]

        def run(self, *args, stream, **kwargs):
            launched.append(("variant", args))

    monkeypatch.setattr(size_variants, "compile_variant", lambda t, values, configs: Variant())
    kernel = _with_variants(Base())
    args = ("in", "out", 48, 7, 4096)
    for _ in range(size_variants.SPECIALIZE_AT + 2):
        kernel.run(*args, stream=0)
    with torch.autograd.profiler.profile():
        kernel.run(*args, stream=0)
    kernel.run("in", "out", 50, 7, 4096, stream=0)
    kernel.run("in", "out", 48, 7, 4096, 0, stream=0)  # another argument layout: the kernel's own
    kinds = [kind for kind, _ in launched]
    assert kinds == ["dynamic"] * size_variants.SPECIALIZE_AT + ["variant", "direct", "variant", "dynamic", "dynamic"]
    assert all(a == args for _, a in launched[:-2])


def test_no_first_variant_launch_while_capturing(monkeypatch):
    """A variant's first launch autotunes it: under CUDA graph capture the dynamic kernel runs."""
    launched = []

    class Base:
        def run(self, *args, stream, **kwargs):
            launched.append("dynamic")

    class Variant:
        launchers = [object(), object()]  # not tuned: no direct launch

        def run(self, *args, stream, **kwargs):
            launched.append("variant")

    monkeypatch.setattr(size_variants, "compile_variant", lambda t, values, configs: Variant())
    kernel = _with_variants(Base())
    args = ("in", "out", 48, 7, 4096)
    for _ in range(size_variants.SPECIALIZE_AT):
        kernel.run(*args, stream=0)
    monkeypatch.setattr(size_variants, "_capturing", lambda: True)
    kernel.run(*args, stream=0)
    monkeypatch.setattr(size_variants, "_capturing", lambda: False)
    kernel.run(*args, stream=0)
    kernel.run(*args, stream=0)  # tuned, with no direct launch: through its run
    assert launched == ["dynamic"] * (size_variants.SPECIALIZE_AT + 1) + ["variant", "variant"]


def test_direct_launch_only_where_run_would_only_launch():
    def launcher(*args, stream):
        pass

    launcher.store_cubin = False
    tuned = types.SimpleNamespace(launchers=[launcher], dump_launch_params=False)
    assert size_variants.direct_launch(tuned) is launcher
    for untuned in ([], [launcher, launcher]):
        assert size_variants.direct_launch(types.SimpleNamespace(launchers=untuned)) is None
    assert size_variants.direct_launch(types.SimpleNamespace(launchers=[launcher], dump_launch_params=True)) is None
    saving = types.SimpleNamespace(store_cubin=True)
    assert size_variants.direct_launch(types.SimpleNamespace(launchers=[saving])) is None
    flat = size_variants.FlatLaunch(TILED, FLAT)
    flat.kernel = types.SimpleNamespace(launchers=[lambda *args, stream: (args, stream)])
    flat.kernel.launchers[0].store_cubin = False
    assert size_variants.direct_launch(flat)("in", "out", 5, 6, 7, 30, 40, stream=3) == (("in", "out", 7, 5, 1200), 3)


TILED = {"in_ptr0": "*fp16", "out_ptr0": "*fp16", "ks0": "i32", "ks1": "i32", "ks2": "i32", "ynumel": "i32",
         "xnumel": "i32", "YBLOCK": "constexpr", "XBLOCK": "constexpr"}
FLAT = {"source": "", "arguments": ["in_ptr0", "out_ptr0", "ks0", "ks1", "xnumel"],
        "pointers": {"in_ptr0": "in_ptr0", "out_ptr0": "out_ptr0"}, "sizes": {"ks0": "ks2", "ks1": "ks0"},
        "numels": {"xnumel": ["ynumel", "xnumel"]}}


def test_flat_launch_arguments():
    launch = size_variants.FlatLaunch(TILED, FLAT)
    # buffers and sizes by the tiled kernel's names, the element count a product of its ranges
    assert launch.arguments(("in", "out", 5, 6, 7, 30, 40)) == ["in", "out", 7, 5, 1200]
    launch.kernel = types.SimpleNamespace(run=lambda *args, stream: (args, stream))
    assert launch.run("in", "out", 5, 6, 7, 30, 40, stream=3) == (("in", "out", 7, 5, 1200), 3)


def test_a_flat_direct_launch_is_one_python_call_before_its_launcher():
    """It runs at every launch of a tuned flat variant, where its Python calls are host time."""
    import cProfile
    import pstats

    flat = size_variants.FlatLaunch(TILED, FLAT)
    flat.kernel = types.SimpleNamespace(launchers=[lambda *args, stream: None])
    flat.kernel.launchers[0].store_cubin = False
    launch = size_variants.direct_launch(flat)
    profile = cProfile.Profile()
    profile.runcall(launch, "in", "out", 5, 6, 7, 30, 40, stream=3)
    python_calls = {key: n for key, (_, n, *_) in pstats.Stats(profile).stats.items() if key[0] != "~"}
    assert sum(python_calls.values()) == 2, python_calls  # the launch, then the launcher


def _tiled_tuner(mutated=(), src=""):
    return types.SimpleNamespace(
        inductor_meta={size_variants.SIZE_ARGS: ["ks0", "ks1", "ks2", "ynumel", "xnumel"], size_variants.FLAT: FLAT,
                       "mutated_arg_names": list(mutated)},
        triton_meta={"signature": TILED}, fn=types.SimpleNamespace(src=src, __name__="k"), launchers=[object()])


def test_a_variant_keeps_the_faster_of_its_tiled_and_flat_forms(monkeypatch):
    timed = []
    monkeypatch.setattr(size_variants, "compile_variant", lambda t, values, configs: "tiled")
    monkeypatch.setattr(size_variants, "compile_flat", lambda t, launch, args: ("flat", launch.arguments(args)))
    monkeypatch.setattr(size_variants, "_faster", lambda launches, args, stream: timed.append(launches) or launches[1])
    tuner = _tiled_tuner()
    sizes = size_variants._Sizes(tuner)
    args = ("in", "out", 5, 6, 7, 30, 40)
    for _ in range(size_variants.SPECIALIZE_AT):
        sizes.seen(tuner, (5, 6, 7, 30, 40), args, 0)
    assert timed == [["tiled", ("flat", ["in", "out", 7, 5, 1200])]]
    assert sizes.variants == {(5, 6, 7, 30, 40): ("flat", ["in", "out", 7, 5, 1200])}


def test_under_cuda_graphs_the_timing_of_both_forms_tunes_the_variant(monkeypatch):
    chosen = Tunable([types.SimpleNamespace(store_cubin=False), object()])  # not to be tuned again
    monkeypatch.setattr(size_variants, "compile_variant", lambda t, values, configs: "tiled")
    monkeypatch.setattr(size_variants, "compile_flat", lambda t, launch, args: "flat")
    monkeypatch.setattr(size_variants, "_faster", lambda launches, args, stream: chosen)
    monkeypatch.setattr(size_variants, "direct_launch", lambda variant: ("direct", variant))
    tuner = _tiled_tuner()
    tuner.inductor_meta[size_variants.CUDA_GRAPHS] = True
    sizes = size_variants._Sizes(tuner)
    sizes.seen(tuner, (5, 6, 7, 30, 40), ("in", "out", 5, 6, 7, 30, 40), 0)
    assert sizes.variants == {(5, 6, 7, 30, 40): chosen} and chosen.tuned_on == []
    assert sizes.launches == {(5, 6, 7, 30, 40): ("direct", chosen)}


def test_no_flat_form_for_kernels_that_read_what_they_mutate_or_after_a_failure(monkeypatch):
    # timed by launching both forms again: an argument updated in place must be one they only write
    writes = "    tl.store(in_out_ptr0 + (x0), tmp3, xmask)\n"
    reads = "    tmp0 = tl.load(in_out_ptr0 + (x0), xmask)\n" + writes
    assert size_variants._Sizes(_tiled_tuner(mutated=["in_out_ptr0"], src=reads)).flat is None
    assert size_variants._Sizes(_tiled_tuner(mutated=["in_out_ptr0"], src=writes)).flat is FLAT
    unkeyed = _tiled_tuner()
    unkeyed.inductor_meta[size_variants.SIZE_ARGS].remove("ks2")  # a size of the flat form
    assert size_variants._Sizes(unkeyed).flat is None

    def fail(tuner, launch, args):
        raise RuntimeError("triton")

    monkeypatch.setattr(size_variants, "compile_variant", lambda t, values, configs: "tiled")
    monkeypatch.setattr(size_variants, "compile_flat", fail)
    tuner = _tiled_tuner()
    sizes = size_variants._Sizes(tuner)
    for _ in range(size_variants.SPECIALIZE_AT):
        sizes.seen(tuner, (5, 6, 7, 30, 40), ("in", "out", 5, 6, 7, 30, 40), 0)
    assert sizes.variants == {(5, 6, 7, 30, 40): "tiled"} and sizes.flat is None


def test_constant_copies_leave_the_kernel_as_it_was(monkeypatch):
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    monkeypatch.setattr(CachingAutotuner, "precompile", lambda self: None)
    meta = {"signature": SIGNATURE, "configs": [{}]}
    kernel = types.SimpleNamespace(triton_meta=meta, inductor_meta={size_variants.SIZE_ARGS: ["ks0"]}, configs=["a", "b"],
                                   save_cache_hook="saves the kernel's best configuration")
    first = size_variants._constant_copy(kernel, "fn", {"ks0": 48}, kernel.configs)
    second = size_variants._constant_copy(kernel, "fn", {"ks0": 50}, kernel.configs)
    assert first.triton_meta["constants"] == {"ks0": 48} and second.triton_meta["constants"] == {"ks0": 50}
    assert kernel.triton_meta is meta and "constants" not in meta and kernel.inductor_meta[size_variants.SIZE_ARGS]
    assert first.inductor_meta == second.inductor_meta == {} and first.configs == ["a", "b"]
    assert first.save_cache_hook is None and kernel.save_cache_hook  # a variant's choice is its own


def test_unmasked_where_the_element_count_fills_every_block():
    source = "def k(in_ptr0, xnumel, XBLOCK : tl.constexpr):\n    xmask = xindex < xnumel\n    tl.store(p, v, xmask)\n"
    configs = [types.SimpleNamespace(kwargs={"XBLOCK": 1024}), types.SimpleNamespace(kwargs={"XBLOCK": 512})]
    constant = "    xmask = tl.full([XBLOCK], True, tl.int1)\n"
    assert size_variants.unmasked(source, 3 * 1024, configs) == source.replace("    xmask = xindex < xnumel\n", constant)
    assert size_variants.unmasked(source, 3 * 512, configs) == source  # a 1024 block would run past
    assert size_variants.unmasked(source, 3 * 1024, [types.SimpleNamespace(kwargs={})]) == source


def test_variants_take_a_constant_mask_where_the_element_count_fills_every_block(monkeypatch, tmp_path):
    from torch._inductor.codecache import PyCodeCache

    source = "def kernel(in_ptr0, xnumel, XBLOCK):\n    xmask = xindex < xnumel\n"
    path = tmp_path / "kernel.py"
    path.write_text(source)
    namespace = {}
    exec(compile(source, str(path), "exec"), namespace)
    fn = types.SimpleNamespace(fn=namespace["kernel"])
    loaded = []
    monkeypatch.setattr(PyCodeCache, "load",
                        lambda text: loaded.append(text) or types.SimpleNamespace(kernel=types.SimpleNamespace(fn="unmasked")))
    monkeypatch.setattr(size_variants, "_constant_copy", lambda tuner, fn, values, configs: fn)
    block = types.SimpleNamespace(kwargs={"XBLOCK": 1024})
    tuner = types.SimpleNamespace(fn=fn, launchers=[types.SimpleNamespace(config=block)])
    assert size_variants.compile_variant(tuner, {"ks0": 64, "xnumel": 4096}) == "unmasked"
    assert loaded == [size_variants.unmasked(source, 4096, [block])] and loaded[0] != source
    assert size_variants.compile_variant(tuner, {"ks0": 64, "xnumel": 4000}) is fn  # a block runs past
    assert size_variants.compile_variant(tuner, {"ks0": 64}) is fn  # the element count stays an argument
    path.unlink()
    assert size_variants.compile_variant(tuner, {"xnumel": 4096}) is fn  # no source: the masked kernel
    assert len(loaded) == 1


def test_checked_torch_versions_only(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    assert size_variants.missing_hooks()[0].startswith("torch 2.99")
    assert size_variants.install()() is None  # nothing installed, nothing to undo


def test_installed_until_uninstalled(monkeypatch):
    # a second install over the package's own, undone before the package's state is touched
    monkeypatch.setattr(size_variants, "_stock", {})
    monkeypatch.setattr(size_variants, "_installed", [])
    monkeypatch.setattr(size_variants, "missing_hooks", lambda: [])
    monkeypatch.setattr(size_variants.flat_sources, "missing_hooks", lambda: ["not needed here"])
    uninstall = size_variants.install()
    assert size_variants.installed()
    uninstall()
    assert not size_variants.installed()


def test_compiling_variants_where_the_python_wrapper_launches(monkeypatch):
    from torch._inductor import config

    monkeypatch.setattr(size_variants, "_installed", [True])
    assert size_variants.compiling_variants()
    with config.patch(cpp_wrapper=True):
        assert not size_variants.compiling_variants()
    with config.patch({"triton.cudagraphs": True}):  # mode="reduce-overhead": a warm-up run per size
        assert size_variants.compiling_variants()
    with config.patch({"triton.cudagraphs": True, "triton.skip_cudagraph_warmup": True}):
        assert not size_variants.compiling_variants()
    monkeypatch.setattr(size_variants, "_installed", [])
    assert not size_variants.compiling_variants()


class Kernel:
    """Stands for ``CachingAutotuner``: its state pickles only without launchers."""

    def __getstate__(self):
        assert not self.launchers
        return dict(vars(self))

    def run(self, *args, stream, **kwargs):
        pass


def test_copies_and_pickles_are_stock_kernels(monkeypatch):
    import copy
    import pickle

    monkeypatch.setattr(size_variants, "compile_variant", lambda t, values, configs: object())
    kernel = _with_variants(Kernel())
    kernel.launchers = []  # Inductor empties them before it copies (prepare_for_pickle)
    for copied in (copy.deepcopy(kernel), pickle.loads(pickle.dumps(kernel))):
        assert type(copied) is Kernel and not hasattr(copied, "_decomps_sizes")
        assert copied.inductor_meta == _tuner().inductor_meta


class TestSizeVariants(TestCase):
    """Compiled with ``dynamic=True`` on CUDA: variants launch, stay exact, and compile nothing
    into the graph (one graph for every size)."""

    def _counted(self):
        compiled = []
        stock = size_variants.compile_variant

        def counted(tuner, values, configs=()):
            variant = stock(tuner, values, configs)
            compiled.append(variant)
            return variant

        return compiled, counted

    def test_variants_exact_without_recompiles(self, device):
        from unittest import mock

        compiled, counted = self._counted()
        f = torch.compile(lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest"), dynamic=True)
        with mock.patch.object(size_variants, "compile_variant", counted):
            for shape in ((2, 3, 20, 30), (2, 3, 24, 31), (3, 5, 20, 30)):
                x = torch.randn(shape, device=device, dtype=torch.float16)
                for _ in range(size_variants.SPECIALIZE_AT + 1):
                    self.assertEqual(f(x), F.interpolate(x, scale_factor=1.5, mode="nearest"), atol=0, rtol=0)
                if shape == (2, 3, 20, 30):
                    torch._dynamo.config.error_on_recompile = True
            torch._dynamo.config.error_on_recompile = False
        self.assertEqual(len(compiled), 3)
        self.assertTrue(all(v is not None and len(v.launchers) == 1 for v in compiled))

    def test_training_step_and_cuda_graphs(self, device):
        """Under ``mode="reduce-overhead"`` the variants are made at each size's warm-up run and
        the capture records them (launched directly while capturing)."""
        from unittest import mock

        compiled, counted = self._counted()
        capturing = []
        stock_direct = size_variants.direct_launch

        def direct(variant):
            launch = stock_direct(variant)
            if launch is None:
                return None

            def recorded(*args, stream):
                capturing.append(torch.cuda.is_current_stream_capturing())
                return launch(*args, stream=stream)

            return recorded

        f = lambda x: F.interpolate(x, size=(37, 45), mode="nearest-exact")  # noqa: E731
        x = torch.randn(2, 8, 20, 30, device=device).contiguous(memory_format=torch.channels_last)
        leaf = x.detach().requires_grad_()
        g = torch.randn_like(f(x))
        doubles = x.detach().double().requires_grad_()
        (reference,) = torch.autograd.grad(f(doubles), doubles, g.double())
        with mock.patch.object(size_variants, "compile_variant", counted), \
                mock.patch.object(size_variants, "direct_launch", direct):
            for mode in (None, "reduce-overhead"):
                torch._dynamo.reset()
                del compiled[:], capturing[:]
                c = torch.compile(f, dynamic=True, mode=mode)
                for _ in range(size_variants.SPECIALIZE_AT + 2):
                    self.assertEqual(c(x), f(x), atol=0, rtol=0)
                    (grad,) = torch.autograd.grad(c(leaf), leaf, g)
                    torch.testing.assert_close(grad.double(), reference, rtol=1e-5, atol=1e-5)
                    self.assertEqual(grad.stride(), x.stride())
                self.assertGreater(len(compiled), 0, mode)
                self.assertTrue(all(v is not None and len(v.launchers) == 1 for v in compiled), mode)
                self.assertEqual(any(capturing), mode == "reduce-overhead")

    def test_every_kernel_of_a_3d_training_step_compiles_its_variant(self, device):
        """The backward's window-position table broadcasts ``(3*ks0) // 2``: that size stays an
        argument of its variant, which compiles; the 1-d gathers' variants are autotuned."""
        from unittest import mock

        compiled, counted = self._counted()
        candidates = []

        def recorded(tuner, values, configs=()):
            candidates.append(list(configs))
            return counted(tuner, values, configs)

        f = lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest-exact")  # noqa: E731
        leaf = torch.randn(2, 3, 8, 8, 8, device=device, dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(2, 3, 12, 12, 12, device=device, dtype=torch.bfloat16)
        doubles = leaf.detach().double().requires_grad_()
        (reference,) = torch.autograd.grad(f(doubles), doubles, g.double())
        c = torch.compile(f, dynamic=True)
        with mock.patch.object(size_variants, "compile_variant", recorded), \
                self.assertNoLogs(size_variants.log, level="WARNING"):
            for _ in range(size_variants.SPECIALIZE_AT + 1):
                self.assertEqual(c(leaf), f(leaf), atol=0, rtol=0)
                (grad,) = torch.autograd.grad(c(leaf), leaf, g)
                torch.testing.assert_close(grad.double(), reference, rtol=1e-2, atol=1e-2)  # bfloat16 sums
        self.assertGreaterEqual(len(compiled), 3)  # the forward gather, the table, the backward's gather
        self.assertTrue(all(v is not None and len(v.launchers) == 1 for v in compiled))  # tuned
        # the 1-d pointwise gathers' variants were tuned over their kernels' candidates
        self.assertGreater(max(len(configs) for configs in candidates), 1)

    def test_variants_whose_blocks_fill_the_element_count_run_unmasked(self, device):
        """The 3d x1.5 step's kernels: where a variant's element count fills every block of its
        configurations it has a constant mask, as a static kernel does, else its mask; exact."""
        from unittest import mock

        compiled = []
        stock = size_variants.compile_variant

        def recorded(tuner, values, configs=()):
            variant = stock(tuner, values, configs)
            blocks = [config.kwargs["XBLOCK"] for config in configs or [tuner.launchers[0].config]]
            compiled.append((values["xnumel"], blocks, variant.fn.src))
            return variant

        f = lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest")  # noqa: E731
        c = torch.compile(f, dynamic=True)
        for shape in ((2, 4, 16, 16, 16), (1, 3, 5, 6, 7)):
            leaf = torch.randn(shape, device=device, dtype=torch.bfloat16, requires_grad=True)
            g = torch.randn_like(f(leaf))
            doubles = leaf.detach().double().requires_grad_()
            (reference,) = torch.autograd.grad(f(doubles), doubles, g.double())
            with mock.patch.object(size_variants, "compile_variant", recorded):
                for _ in range(size_variants.SPECIALIZE_AT + 2):
                    self.assertEqual(c(leaf), f(leaf), atol=0, rtol=0)
                    (grad,) = torch.autograd.grad(c(leaf), leaf, g)
                    torch.testing.assert_close(grad.double(), reference, rtol=1e-2, atol=1e-2)  # bfloat16 sums
        # per shape: the forward's gather, the backward's window table and its gather
        self.assertEqual(len(compiled), 6)
        for numel, blocks, source in compiled:
            fills = all(numel % block == 0 for block in blocks)
            self.assertEqual("xmask = tl.full" in source, fills)
            self.assertEqual("xmask = xindex < xnumel" in source, not fills)
        self.assertEqual(sum("xmask = tl.full" in source for *_, source in compiled[:3]), 3)

    def test_window_gathers_choose_as_static_sizes_under_variants(self, device):
        """A contiguous 2d backward that gathers windows runs the generated gather where its
        kernels launch variants, under CUDA graphs too, and ATen's kernel where a capture comes
        before any launch (``triton.skip_cudagraph_warmup``: no variants); eager's float64
        gradients either way."""
        from torch._inductor import config
        from torch._inductor.utils import run_and_get_code

        f = lambda x: F.interpolate(x, size=(37, 45), mode="nearest")  # noqa: E731
        leaf = torch.randn(2, 3, 20, 30, device=device, dtype=torch.float64, requires_grad=True)
        g = torch.randn(2, 3, 37, 45, device=device, dtype=torch.float64)
        (expected,) = torch.autograd.grad(f(leaf), leaf, g)
        # without a warm-up a kernel's first launch is its capture, where a stock kernel with
        # several configurations cannot autotune: one configuration each there
        no_warm_up = {"triton.skip_cudagraph_warmup": True, "triton.autotune_pointwise": False}
        cases = ((None, {}, False), ("reduce-overhead", {}, False), ("reduce-overhead", no_warm_up, True))
        for mode, patch, aten_kernel in cases:
            torch._dynamo.reset()
            with config.patch(patch):
                c = torch.compile(f, dynamic=True, mode=mode)
                step = lambda: torch.autograd.grad(c(leaf), leaf, g)  # noqa: E731
                (grad,), codes = run_and_get_code(step)
                self.assertEqual("torch.ops.aten.upsample_nearest2d_backward.default(" in "\n".join(codes),
                                 aten_kernel, (mode, patch))
                for _ in range(size_variants.SPECIALIZE_AT + 1):
                    (grad,) = step()
                    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-12)  # sums of 1-4 terms

    def tearDown(self):
        torch._dynamo.config.error_on_recompile = False
        super().tearDown()


instantiate_device_type_tests(TestSizeVariants, globals(), only_for=("cuda",))
