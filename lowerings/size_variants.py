"""Per-size variants of the package's Triton kernels with dynamic shapes.

A dynamic kernel divides its index by sizes it reads from its arguments, and Triton can neither
fold those divisions nor prove the alignment it needs to vectorize; the same kernel with the
sizes written in runs as the static one (a gather: x1.5 f16 75 us dynamic, 38 static;
docs/findings.md, finding 1). Inductor already compiles an argument that equals 1 as a constant
(``triton_meta["constants"]``, the signature entry ``constexpr``) while callers still pass it.

``package_kernels`` names the symbolic size arguments of each kernel that holds package nodes
and indexes in 32 bits (``inductor_meta[SIZE_ARGS]``). Such a kernel, once loaded, launches the
variant compiled with the values of those arguments as constants when that tuple of values has
been launched ``SPECIALIZE_AT`` times, for at most ``MAX_VARIANTS`` tuples; other sizes run the
dynamic kernel. A variant is the same source, so its results are bit-identical, with a constant
mask where its element count fills every block (``unmasked``, as Inductor writes a static kernel):
with the dynamic kernel's autotuned launch configuration, or for a 1-d pointwise kernel, whose
values do not depend on the configuration, autotuned at its first launch over the kernel's own
candidates (``candidate_configs``; the dynamic kernel's choice is made for its index arithmetic).
Its sizes fit the 32-bit arguments they replace, so no expression changes type. A kernel tiled
for runtime sizes also carries its flat form (``flat_sources``): its variant compiles that with
the same constants too, times both on the launch's arguments and keeps the faster (a pointwise
kernel's values do not depend on its tiling). Nothing is compiled or tuned while a CUDA graph is
being captured: a kernel compiled for CUDA graphs (``inductor_meta[CUDA_GRAPHS]``, under
``mode="reduce-overhead"``) compiles and tunes the variant of a tuple at its first launch, the
warm-up run that CUDA graph trees give each new size before they capture it, so the capture
records the variant. Graphs do not recompile: the choice is made per launch, from the arguments,
and a tuned variant is launched through its launcher, without ``CachingAutotuner.run``'s
per-call preamble (``direct_launch``).
"""

from __future__ import annotations

import logging
import operator
import re
import threading
from collections.abc import Callable

from . import flat_sources
from ._undo import replace_attribute
from .cached_launch import kernel_subclass, launcher_alone
from .flat_sources import FLAT

log = logging.getLogger(__name__)

SIZE_ARGS = "decomps_size_args"
# Set on kernels compiled for CUDA graphs, whose second launch of a size is its capture.
CUDA_GRAPHS = "decomps_cuda_graphs"
# A tuple of sizes launched this often gets its variant (1 would compile for every size a
# variable-size workload passes once).
SPECIALIZE_AT = 2
# Variants per kernel; each is one Triton compile (a size-specialized gather: 67-101 ms on an H200).
# A loaded kernel is shared by every graph of the process whose code has its source (Inductor
# caches modules by source), so call sites at several resolutions, and several input sizes of
# each, draw on one budget: a decoder's four x2 upsamples at two input sizes need 8.
MAX_VARIANTS = 16
# Distinct size tuples counted per kernel before the counts start over.
MAX_COUNTED = 64


def _broadcast_values(source: str) -> list[str]:
    """The first argument of each ``broadcast_to(...)`` call in ``source``."""
    values = []
    for match in re.finditer(r"broadcast_to\(", source):
        depth, end = 0, match.end()
        while end < len(source) and (depth or source[end] != ","):
            depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(source[end], 0)
            if depth < 0:
                break
            end += 1
        values.append(source[match.end():end])
    return values


def constant_names(names, source: str) -> tuple[str, ...]:
    """The size arguments a variant takes as constants: all but those in a value the kernel
    broadcasts (``tl.broadcast_to(ks0, ...)``, ``tl.broadcast_to((3*ks0) // 2, ...)``), which
    Triton refuses for a constant."""
    broadcast = " ".join(_broadcast_values(source))
    return tuple(name for name in names if not re.search(rf"\b{name}\b", broadcast))


def _constant_meta(triton_meta: dict, values: dict[str, int]) -> dict:
    """``triton_meta`` with ``values`` as constants, as Inductor marks an argument equal to 1."""
    signature = triton_meta["signature"]
    positions = {(i,) for i, name in enumerate(signature) if name in values}
    meta = dict(triton_meta)
    meta["signature"] = {name: "constexpr" if name in values else t for name, t in signature.items()}
    meta["constants"] = {**triton_meta.get("constants", {}), **values}
    meta["configs"] = [
        {key: attrs for key, attrs in config.items() if key not in positions}
        for config in triton_meta["configs"]
    ]
    return meta


def _constant_copy(tuner, fn, values: dict[str, int], configs: list):
    """A stock ``CachingAutotuner`` of ``tuner``'s kernel ``fn`` with ``values`` as constants and
    ``configs``, compiled in this process; ``tuner`` itself stays as it was."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    variant = object.__new__(CachingAutotuner)  # copy.copy pickles, which a loaded kernel refuses
    variant.__dict__.update({k: v for k, v in vars(tuner).items() if k != "_decomps_sizes"})
    variant.fn = fn
    variant.triton_meta = _constant_meta(tuner.triton_meta, values)
    variant.inductor_meta = {k: v for k, v in tuner.inductor_meta.items() if k not in (SIZE_ARGS, FLAT, CUDA_GRAPHS)}
    variant.configs = configs
    variant.save_cache_hook = None  # a variant's choice is not the dynamic kernel's
    variant.compile_results = []
    variant.launchers = []
    variant.lock = threading.Lock()
    variant.precompile()
    return variant


def compile_variant(tuner, values: dict[str, int], configs=()):
    """``tuner``'s kernel with ``values`` as constants and ``configs`` (autotuned at its first
    launch), or where none are given ``tuner``'s chosen configuration; None where the kernel's
    function is not at hand."""
    fn = tuner.fn
    if getattr(fn, "fn", None) is None:  # compiled in a worker: the parent reloads it
        reload = getattr(tuner, "_reload_kernel", None)
        if reload is None:
            return None
        fn = reload().fn
    configs = list(configs) or [tuner.launchers[0].config]
    if "xnumel" in values:
        fn = _with_constant_mask(fn, int(values["xnumel"]), configs)
    return _constant_copy(tuner, fn, values, configs)


def _with_constant_mask(fn, numel: int, configs):
    """``fn``, or where ``numel`` fills every block of ``configs`` the same kernel loaded from its
    module's source with a constant mask (``unmasked``): a mask that is not known to be all true
    stays in every masked load and store (the 3d x1.5 bf16 backward gather: 86.1 us against 78.4,
    the static kernel's 75.7; docs/findings.md, finding 1)."""
    try:
        with open(fn.fn.__code__.co_filename) as file:
            source = file.read()
    except OSError:  # the module's file is gone: the masked kernel is as exact
        return fn
    loaded = _load_unmasked(source, fn.fn.__name__, numel, configs)
    return fn if loaded is None else loaded.fn


def _load_unmasked(source: str, name: str, numel: int, configs):
    """Kernel ``name`` of module ``source`` with a constant mask (``unmasked``); None where
    ``numel`` does not fill every block of ``configs``."""
    from torch._inductor.codecache import PyCodeCache

    changed = unmasked(source, numel, configs)
    return None if changed == source else getattr(PyCodeCache.load(changed), name)


def candidate_configs(tuner) -> list:
    """The configurations a variant of ``tuner`` is autotuned over, read while the kernel holds
    all it was compiled with: those of a 1-d pointwise kernel, whose values do not depend on the
    configuration and whose dynamic kernel's choice was made for its own index arithmetic
    (docs/findings.md, finding 1); none otherwise (a variant takes the dynamic kernel's choice)."""
    from torch._inductor.runtime.hints import HeuristicType

    if getattr(tuner, "heuristic_type", None) != HeuristicType.POINTWISE:
        return []
    if "YBLOCK" in tuner.triton_meta["signature"]:  # tiled: timed against its flat form instead
        return []
    configs = [launcher.config for launcher in tuner.launchers]
    return configs if len(configs) > 1 else []


def _capturing() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class FlatLaunch:
    """A size variant's flat form (``lowerings.flat_sources``), launched with the tiled kernel's
    arguments: its own, in its signature's order, taken from those by ``FLAT``'s map."""

    def __init__(self, tiled_signature: dict[str, str], flat: dict) -> None:
        launched = [name for name, t in tiled_signature.items() if t != "constexpr"]
        position = {name: i for i, name in enumerate(launched)}
        sources = {**flat["pointers"], **flat["sizes"]}
        takes = [
            (position[sources[name]],) if name in sources else tuple(position[n] for n in flat["numels"][name])
            for name in flat["arguments"]
        ]
        # Written out once as one expression per argument (a product for an element count), so
        # that a launch takes them in one call, without a loop: this runs at every launch.
        values = [" * ".join(f"a[{i}]" for i in take) for take in takes]
        self.arguments: Callable[[tuple], list] = eval(f"lambda a: [{', '.join(values)}]")
        # ``calling(launch)``: ``launch`` called with them, given the tiled kernel's arguments
        self.calling: Callable[[Callable], Callable] = eval(
            f"lambda launch: lambda *a, stream: launch({', '.join([*values, 'stream=stream'])})")
        self.kernel = None

    def run(self, *args, stream, **kwargs):
        return self.kernel.run(*self.arguments(args), stream=stream, **kwargs)


def direct_launch(variant) -> Callable | None:
    """What ``variant.run`` calls to launch its kernel once it is tuned, where ``run`` would do
    nothing else (``cached_launch.launcher_alone``); None otherwise. A variant launches through
    it, saving ``run``'s preamble (its Python calls are most of what a size variant adds to a
    call's host time), except under the profiler or a ``DebugMode``, which ``run`` tells which
    kernel launches."""
    if isinstance(variant, FlatLaunch):
        launch = direct_launch(variant.kernel)
        return None if launch is None else variant.calling(launch)
    return launcher_alone(variant)


def unmasked(source: str, numel: int, configs) -> str:
    """``source`` with a constant mask of its elements where ``numel`` fills every block of every
    configuration in ``configs``, as Inductor writes a kernel whose element count it knows to be
    a multiple of its largest block (``create_constant_mask``)."""
    blocks = [config.kwargs.get("XBLOCK") for config in configs]
    if not blocks or not all(blocks) or any(numel % block for block in blocks):
        return source
    return source.replace("    xmask = xindex < xnumel\n", "    xmask = tl.full([XBLOCK], True, tl.int1)\n")


def compile_flat(tuner, launch: FlatLaunch, args) -> FlatLaunch:
    """``launch`` with its kernel: ``tuner``'s flat form with the sizes of ``args`` (the tiled
    kernel's launch) as constants and the flat kernel's own configurations (autotuned at its
    first launch)."""
    from torch._inductor.codecache import PyCodeCache

    flat = tuner.inductor_meta[FLAT]
    name = f"{tuner.fn.__name__}_flat"
    # each source is loaded once per process (modules are cached by source); a variant is a copy
    source = flat_sources.unpack(flat["source"]).replace(flat_sources.NAME, name)
    loaded = getattr(PyCodeCache.load(source), name)
    values = dict(zip(flat["arguments"], launch.arguments(args)))
    if "xnumel" in values:
        loaded = _load_unmasked(source, name, int(values["xnumel"]), loaded.configs) or loaded
    sizes = constant_names([*flat["sizes"], *flat["numels"]], loaded.fn.src)
    launch.kernel = _constant_copy(loaded, loaded.fn, {n: int(values[n]) for n in sizes}, loaded.configs)
    return launch


def _tuned_now(variant, args) -> bool:
    """Autotunes ``variant`` on ``args`` where it holds several configurations (its first launch
    would, and a CUDA graph's capture cannot); False where that fails."""
    if len(variant.launchers) > 1:
        try:
            variant.autotune_to_one_config(*args)  # clones the arguments it mutates
        except Exception:  # the dynamic kernel serves this tuple
            log.warning("no tuned size variant of %s", variant.fn.__name__, exc_info=True)
            return False
    return True


def _faster(launches: list, args, stream):
    """The launch of ``launches`` that takes the least GPU time with ``args``."""
    from torch._inductor.runtime.benchmarking import benchmarker

    for launch in launches:  # compiles and autotunes outside the timing
        launch.run(*args, stream=stream)
    times = [benchmarker.benchmark_gpu(lambda run=launch.run: run(*args, stream=stream)) for launch in launches]
    return launches[times.index(min(times))]


class _Sizes:
    """A kernel's size arguments, its variants and the counts of the tuples not yet compiled."""

    def __init__(self, tuner) -> None:
        signature = tuner.triton_meta["signature"]
        order = list(signature)
        # a launch passes every argument but the constexprs, in signature order
        self.arguments = sum(t != "constexpr" for t in signature.values())
        self.keys = tuple(tuner.inductor_meta[SIZE_ARGS])
        self.positions = tuple(order.index(name) for name in self.keys)
        # a tuple of several sizes, one size alone
        self.key = operator.itemgetter(*self.positions)
        self.names = constant_names(self.keys, tuner.fn.src)
        flat = tuner.inductor_meta.get(FLAT)
        # the flat form is timed against the tiled variant by launching both again (arguments
        # they mutate must be ones they only write), and its constants are the sizes of the key
        mutated = tuner.inductor_meta.get("mutated_arg_names") or ()
        reads_mutated = flat_sources.loads_any(tuner.fn.src, mutated)
        self.flat = flat if flat and not reads_mutated and set(flat["sizes"].values()) <= set(self.keys) else None
        self.configs = candidate_configs(tuner)
        self.variants: dict = {}  # by key: a tuple of sizes, or one size
        self.launches: dict = {}  # the variants' direct launches (None: through their run), once tuned
        self.counts: dict = {}
        self.off = not self.names and not self.flat
        # CUDA graph trees run a new size once, then capture it: its variant is made at that run
        self.cuda_graphs = bool(tuner.inductor_meta.get(CUDA_GRAPHS))
        self.specialize_at = 1 if self.cuda_graphs else SPECIALIZE_AT

    def seen(self, tuner, key: tuple, args, stream) -> None:
        if self.off or len(self.variants) >= MAX_VARIANTS or len(tuner.launchers) != 1:
            return
        if len(self.counts) >= MAX_COUNTED:
            self.counts.clear()
        count = self.counts[key] = self.counts.get(key, 0) + 1
        if count < self.specialize_at or _capturing():
            return
        del self.counts[key]
        values = dict(zip(self.keys, key if len(self.keys) > 1 else (key,)))
        try:
            variant = compile_variant(tuner, {name: values[name] for name in self.names}, self.configs)
        except Exception:  # the dynamic kernel still serves every size
            log.warning("no size variants of %s", tuner.fn.__name__, exc_info=True)
            variant = None
        if variant is None:
            self.off = True
            return
        if self.flat:
            try:
                launch = FlatLaunch(tuner.triton_meta["signature"], self.flat)
                variant = _faster([variant, compile_flat(tuner, launch, args)], args, stream)
            except Exception:  # the tiled variant serves this tuple
                log.warning("no flat variant of %s", tuner.fn.__name__, exc_info=True)
                self.flat = None
        # timed against its flat form, a variant is tuned; else under CUDA graphs it is tuned now
        if self.cuda_graphs and not (self.flat or _tuned_now(variant, args)):
            return
        self.variants[key] = variant
        if self.cuda_graphs:
            self.tuned(key)

    def tuned(self, key) -> None:
        """After a variant's first launch, which autotuned it: its direct launch."""
        self.launches[key] = direct_launch(self.variants[key])


_stock: dict[str, Callable] = {}
_installed: list[bool] = []  # one entry while installed
_variant_classes: dict[type, type] = {}


def _variant_class(base: type) -> type:
    """``base`` whose ``run`` launches a size variant where one is compiled."""
    if base not in _variant_classes:
        from torch._inductor.runtime import triton_heuristics
        from torch.autograd import profiler

        # run records a launch in an active DebugMode (torch >= 2.11)
        debug_mode = getattr(triton_heuristics, "get_active_debug_mode", lambda: None)

        def run(self, *args, stream, **kwargs):
            sizes = self._decomps_sizes
            if len(args) != sizes.arguments:  # not the launch this kernel was generated for
                return base.run(self, *args, stream=stream, **kwargs)
            key = sizes.key(args)
            launch = sizes.launches.get(key)
            if launch is not None and not kwargs and not profiler._is_profiler_enabled and not debug_mode():
                return launch(*args, stream=stream)
            variant = sizes.variants.get(key)
            # a variant's first launch autotunes it, which a CUDA graph being captured cannot hold
            if variant is not None and (key in sizes.launches or not _capturing()):
                result = variant.run(*args, stream=stream, **kwargs)
                if key not in sizes.launches:
                    sizes.tuned(key)
                return result
            result = base.run(self, *args, stream=stream, **kwargs)
            sizes.seen(self, key, args, stream)
            return result

        # copies and pickles are stock kernels without the variants
        _variant_classes[base] = kernel_subclass(base, "SizeVariants", run, "_decomps_sizes")
    return _variant_classes[base]


def precompile(self, *args, **kwargs):
    """Inductor's ``CachingAutotuner.precompile``; a package kernel that names its size arguments
    then launches through its size variants."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    result = _stock["precompile"](self, *args, **kwargs)
    if (
        type(self) is CachingAutotuner
        and self.inductor_meta.get(SIZE_ARGS)
        and not kwargs.get("warm_cache_only", args[0] if args else False)
        and self.launchers
    ):
        try:
            sizes = _Sizes(self)
        except (AttributeError, KeyError, ValueError):  # a kernel not laid out as expected: stock
            log.warning("no size variants of %s", getattr(self.fn, "__name__", self.fn), exc_info=True)
            return result
        self._decomps_sizes = sizes
        self.__class__ = _variant_class(CachingAutotuner)
    return result


# The torch versions whose Inductor launches were checked against this module's reading of
# them (argument order, ``_reload_kernel``, the static-launch cache's copies) on a GPU.
TESTED_TORCH = ((2, 11),)


def missing_hooks() -> list[str]:
    """What the variants need from this torch and Triton; without it they stay off."""
    import torch

    from .versions import torch_release

    if torch_release() not in TESTED_TORCH:
        return [f"torch {torch.__version__} (variants checked on {TESTED_TORCH})"]
    try:
        from torch._inductor.runtime import triton_heuristics
        from torch._inductor.utils import triton_version_uses_attrs_dict
        from torch.utils._triton import has_triton
    except ImportError:
        return ["torch._inductor.runtime.triton_heuristics"]
    if not has_triton():
        return ["triton"]
    missing = []
    if not triton_version_uses_attrs_dict():  # constants as signature entries, attrs as a dict
        missing.append("triton attrs dict")
    autotuner = triton_heuristics.CachingAutotuner
    for name in ("precompile", "run", "_precompile_config"):
        if not callable(getattr(autotuner, name, None)):
            missing.append(f"CachingAutotuner.{name}")
    return missing


def installed() -> bool:
    """Whether the package's Triton kernels launch through their size variants in this process."""
    return bool(_installed)


def compiling_variants() -> bool:
    """Whether the kernels of the graph being compiled will launch size variants: installed, and
    launched by the Python wrapper (a C++ wrapper launches kernels itself), under CUDA graphs
    where each size runs once before its capture (a capture with
    ``triton.skip_cudagraph_warmup`` records the kernels of a size's first call, when no variant
    compiles)."""
    if not installed():
        return False
    from torch._inductor import config

    return not config.cpp_wrapper and not (config.triton.cudagraphs and config.triton.skip_cudagraph_warmup)


def install() -> Callable[[], None]:
    if missing_hooks():
        return lambda: None
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    _stock["precompile"] = CachingAutotuner.precompile
    undo = [replace_attribute(CachingAutotuner, "precompile", precompile)]
    if not flat_sources.missing_hooks():
        undo.append(flat_sources.install())
    _installed.append(True)
    undo.append(_installed.pop)

    def uninstall() -> None:
        for step in reversed(undo):
            step()

    return uninstall
