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
dynamic kernel. A variant is the same source with the same launch configuration (the dynamic
kernel's autotuned one), so its results are bit-identical; its sizes fit the 32-bit arguments
they replace, so no expression changes type. Nothing is compiled while a CUDA graph is being
captured. Graphs do not recompile: the choice is made per launch, from the arguments.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable

from ._undo import replace_attribute

log = logging.getLogger(__name__)

SIZE_ARGS = "decomps_size_args"
# A tuple of sizes launched this often gets its variant (1 would compile for every size a
# variable-size workload passes once).
SPECIALIZE_AT = 2
# Variants per kernel; each is one Triton compile (a size-specialized gather: 67-101 ms on an H200).
MAX_VARIANTS = 4
# Distinct size tuples counted per kernel before the counts start over.
MAX_COUNTED = 64


def constant_names(names, source: str) -> tuple[str, ...]:
    """The size arguments a variant takes as constants: all but those the kernel broadcasts as
    values of their own (``tl.broadcast_to(ks0, ...)``), which Triton refuses for a constant."""
    return tuple(name for name in names if not re.search(rf"broadcast_to\(\s*{name}\b", source))


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


def compile_variant(tuner, values: dict[str, int]):
    """A stock ``CachingAutotuner`` for ``tuner``'s kernel with ``values`` as constants and
    ``tuner``'s chosen configuration, compiled in this process; None where the kernel's
    function is not at hand."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    fn = tuner.fn
    if getattr(fn, "fn", None) is None:  # compiled in a worker: the parent reloads it
        reload = getattr(tuner, "_reload_kernel", None)
        if reload is None:
            return None
        fn = reload().fn
    variant = object.__new__(CachingAutotuner)  # copy.copy pickles, which a loaded kernel refuses
    variant.__dict__.update({k: v for k, v in vars(tuner).items() if k != "_decomps_sizes"})
    variant.fn = fn
    variant.triton_meta = _constant_meta(tuner.triton_meta, values)
    variant.inductor_meta = {k: v for k, v in tuner.inductor_meta.items() if k != SIZE_ARGS}
    variant.configs = [tuner.launchers[0].config]
    variant.compile_results = []
    variant.launchers = []
    variant.lock = threading.Lock()
    variant.precompile()
    return variant


def _capturing() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class _Sizes:
    """A kernel's size arguments, its variants and the counts of the tuples not yet compiled."""

    def __init__(self, tuner) -> None:
        order = list(tuner.triton_meta["signature"])
        # a launch passes every argument but the constexprs, in signature order
        self.arguments = sum(t != "constexpr" for t in tuner.triton_meta["signature"].values())
        self.names = constant_names(tuner.inductor_meta[SIZE_ARGS], tuner.fn.src)
        self.positions = tuple(order.index(name) for name in self.names)
        self.variants: dict[tuple, object] = {}
        self.counts: dict[tuple, int] = {}
        self.off = not self.names

    def seen(self, tuner, key: tuple) -> None:
        if self.off or len(self.variants) >= MAX_VARIANTS or len(tuner.launchers) != 1:
            return
        if len(self.counts) >= MAX_COUNTED:
            self.counts.clear()
        count = self.counts[key] = self.counts.get(key, 0) + 1
        if count < SPECIALIZE_AT or _capturing():
            return
        del self.counts[key]
        try:
            variant = compile_variant(tuner, dict(zip(self.names, key)))
        except Exception:  # the dynamic kernel still serves every size
            log.warning("no size variants of %s", tuner.fn.__name__, exc_info=True)
            variant = None
        if variant is None:
            self.off = True
        else:
            self.variants[key] = variant


_stock: dict[str, Callable] = {}
_variant_classes: dict[type, type] = {}


def _new(cls: type):
    return cls.__new__(cls)


def _variant_class(base: type) -> type:
    """``base`` whose ``run`` launches a size variant where one is compiled."""
    if base not in _variant_classes:

        def run(self, *args, stream, **kwargs):
            sizes = self._decomps_sizes
            if len(args) != sizes.arguments:  # not the launch this kernel was generated for
                return base.run(self, *args, stream=stream, **kwargs)
            key = tuple(args[i] for i in sizes.positions)
            variant = sizes.variants.get(key)
            if variant is not None:
                return variant.run(*args, stream=stream, **kwargs)
            result = base.run(self, *args, stream=stream, **kwargs)
            sizes.seen(self, key)
            return result

        def __reduce_ex__(self, protocol):
            # Copies and pickles (Inductor's cache of statically launched kernels deep-copies a
            # loaded kernel) are stock kernels without the variants, whose launchers do not pickle.
            state = {k: v for k, v in self.__getstate__().items() if k != "_decomps_sizes"}
            return (_new, (base,), state)

        _variant_classes[base] = type(
            f"SizeVariants{base.__name__}", (base,), {"run": run, "__reduce_ex__": __reduce_ex__, "__module__": __name__}
        )
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

    version = tuple(int(part) for part in torch.__version__.split(".")[:2])
    if version not in TESTED_TORCH:
        return [f"torch {version[0]}.{version[1]} (variants checked on {TESTED_TORCH})"]
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


def install() -> Callable[[], None]:
    if missing_hooks():
        return lambda: None
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    _stock["precompile"] = CachingAutotuner.precompile
    return replace_attribute(CachingAutotuner, "precompile", precompile)
