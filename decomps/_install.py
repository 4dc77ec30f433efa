"""Installation: makes torch.compile run this package's decompositions, and undoes that exactly.

Three things change while installed (docs/design.md has the why):

1. Dispatcher. Stock PyTorch registers Python-dispatcher kernels (``py_impl``) for
   CompositeImplicitAutograd and Autograd on the forward overloads. While tracing (Dynamo,
   AOTAutograd, export) they decompose the op *above* autograd into ``_unsafe_index``, whose
   derivative is an ``index_put(accumulate=True)`` scatter. On ``.default`` they are removed, so
   the op keeps its C++ autograd formula and its derivative is the matching ``*_backward`` op;
   on ``.vec`` they are replaced by a kernel that only calls ``.default`` (ATen's C++ one would
   too, but rejects symbolic sizes). Fake tensors now reach ``.default``'s Meta kernel, whose
   Python version in torch fails on an empty batch, so ``.default`` gets a Meta kernel too.
2. Inductor (``lowerings.install``): our decompositions go into Inductor's decomposition table,
   which AOTAutograd applies *below* autograd, and Inductor's own upsample lowerings step aside.
3. Caches. The AOTAutograd cache key does not see decomposition tables, so a tag naming this
   package's source goes into ``torch.compiler.config.cache_key_tag``, in the layers every thread
   reads (torch 2.13 keeps assigned config values per thread); Dynamo's in-memory code cache is
   reset on every change so no graph compiled in one state is served in the other.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import pathlib
import threading
import warnings
from collections.abc import Iterator

import torch
from torch._C import DispatchKey
from torch._ops import OpOverload

import lowerings
from lowerings.versions import torch_release

from . import block_pool, forward, ops
from ._registry import DECOMPOSITIONS

# Python-dispatcher kernels that decompose the forward ops above autograd.
_ABOVE_AUTOGRAD_KEYS = (DispatchKey.CompositeImplicitAutograd, DispatchKey.Autograd)

# One kernel object per .vec overload, so reinstalling registers the very same callables.
_VEC_KERNELS = {
    packet.vec: functools.partial(forward.vec_to_default, packet.default)
    for packet in ops.FORWARD.values()
}

# One Meta kernel per .default overload, for the same reason.
_META_KERNELS = {
    packet.default: functools.partial(forward.meta_default, rank)
    for (rank, _), packet in ops.FORWARD.items()
}
_ABSENT = object()

# The newest torch release (major, minor) the suite runs on in CI. A newer torch gets a warning
# at install; the package installs wherever its hooks exist (``_missing_hooks``).
NEWEST_TESTED_TORCH = (2, 15)

_lock = threading.RLock()
_undo: list | None = None  # while installed: callables that restore stock state, in order
_warned = False
_warned_newer = False


def _source_fingerprint() -> str:
    """Hash of this package's source: part of every compile-cache key while installed."""
    digest = hashlib.sha256(torch.__version__.encode())
    for package in (pathlib.Path(__file__).parent, pathlib.Path(lowerings.__file__).parent):
        for path in sorted(package.glob("*.py")):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _missing_hooks() -> list[str]:
    """Internal torch hooks installation needs; empty on a supported torch."""
    missing = lowerings.missing_hooks()
    entry = getattr(torch.compiler.config, "_config", {}).get("cache_key_tag")
    if not isinstance(getattr(entry, "default", None), str):
        missing.append("torch.compiler.config.cache_key_tag")
    for attribute in ("py_kernels", "_dispatch_cache"):
        overloads = ops.FORWARD_ENTRY_OVERLOADS
        if not all(isinstance(getattr(op, attribute, None), dict) for op in overloads):
            missing.append(f"OpOverload.{attribute}")
    return missing


def _newer_than_tested() -> bool:
    """Whether this torch's release is past ``NEWEST_TESTED_TORCH`` (a 2.16 nightly counts)."""
    release = torch_release()
    return release is not None and release > NEWEST_TESTED_TORCH


def _reroute_above_autograd_kernels() -> None:
    """``.default``: drop the Python kernels. ``.vec``: forward to ``.default`` unchanged."""
    for packet in ops.FORWARD.values():
        for op, kernel in (
            (packet.default, None),
            (packet.vec, _VEC_KERNELS[packet.vec]),
        ):
            saved = {k: op.py_kernels.pop(k) for k in _ABOVE_AUTOGRAD_KEYS if k in op.py_kernels}
            if kernel is not None:
                op.py_kernels.update(dict.fromkeys(_ABOVE_AUTOGRAD_KEYS, kernel))
            op._dispatch_cache.clear()

            def restore(op: OpOverload = op, saved: dict = saved) -> None:
                for key in _ABOVE_AUTOGRAD_KEYS:
                    op.py_kernels.pop(key, None)
                op.py_kernels.update(saved)
                op._dispatch_cache.clear()

            _undo.append(restore)


def _replace_meta_kernels() -> None:
    """``.default``: a Meta kernel that accepts an empty batch (``forward.meta_default``).

    Fake tensors reach the Meta kernel of ``.default`` only because the Python kernels above are
    gone; torch's own (``torch/_meta_registrations.py``) raises TypeError for ``N == 0``.
    """
    for op, kernel in _META_KERNELS.items():
        saved = op.py_kernels.get(DispatchKey.Meta, _ABSENT)
        op.py_kernels[DispatchKey.Meta] = kernel
        op._dispatch_cache.clear()

        def restore(op: OpOverload = op, saved=saved) -> None:
            if saved is _ABSENT:
                op.py_kernels.pop(DispatchKey.Meta, None)
            else:
                op.py_kernels[DispatchKey.Meta] = saved
            op._dispatch_cache.clear()

        _undo.append(restore)


# Where a torch.compiler.config entry keeps its value, highest precedence first.
_CONFIG_LAYERS = ("env_value_force", "user_override", "env_value_default", "default")


def _cache_key_tag_entry():
    return torch.compiler.config._config["cache_key_tag"]


def _process_wide_layers(entry) -> list[str]:
    """The layers of the ``cache_key_tag`` entry that every thread reads.

    ``config.cache_key_tag = ...`` writes ``user_override``: a plain attribute in torch 2.11, a
    ContextVar in 2.13, where it would tag only the calling thread's compile-cache keys. The
    default (or TORCH_COMPILE_CACHE_KEY_TAG's value) is shared by all threads.
    """
    return [
        layer
        for layer in _CONFIG_LAYERS
        if not isinstance(getattr(entry, layer, None), contextvars.ContextVar)
    ]


def _tag_cache_keys() -> None:
    """Appends this package's fingerprint to ``cache_key_tag`` for every thread.

    Tags each process-wide layer that holds a value (a string), so whichever one a thread reads
    carries it. A 2.13 thread that sets its own tag reads that instead (docs/robustness.md).
    """
    entry = _cache_key_tag_entry()
    suffix = f"+decomps-{_source_fingerprint()}"
    saved = {layer: getattr(entry, layer) for layer in _process_wide_layers(entry)}
    saved = {layer: value for layer, value in saved.items() if isinstance(value, str)}
    for layer, value in saved.items():
        setattr(entry, layer, value + suffix)

    def restore() -> None:
        for layer, value in saved.items():
            setattr(entry, layer, value)

    _undo.append(restore)


def install() -> bool:
    """Installs the decompositions; idempotent. Returns whether they are installed.

    On a torch that lacks a hook this needs, warns once and leaves stock behaviour. On a torch
    newer than ``NEWEST_TESTED_TORCH`` that has them, warns once and installs.
    """
    global _undo, _warned, _warned_newer
    with _lock:
        if _undo is not None:
            return True
        missing = _missing_hooks()
        if missing:
            if not _warned:
                _warned = True
                warnings.warn(
                    f"decomps: torch {torch.__version__} lacks {', '.join(missing)}; "
                    "leaving stock nearest upsampling in place",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return False
        if not _warned_newer and _newer_than_tested():
            _warned_newer = True
            warnings.warn(
                f"decomps: torch {torch.__version__} is newer than the newest tested release "
                f"({'.'.join(map(str, NEWEST_TESTED_TORCH))}); installing",
                UserWarning,
                stacklevel=2,
            )
        _undo = []
        _reroute_above_autograd_kernels()
        _replace_meta_kernels()
        _undo.append(lowerings.install(DECOMPOSITIONS))
        _tag_cache_keys()
        torch._dynamo.reset()
        return True


def uninstall() -> None:
    """Restores stock behaviour exactly; idempotent."""
    global _undo
    with _lock:
        if _undo is None:
            return
        for restore in reversed(_undo):
            restore()
        _undo = None
        block_pool.clear()
        torch._dynamo.reset()


def is_installed() -> bool:
    return _undo is not None


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Stock behaviour inside the block; the previous state is restored on exit."""
    with _lock:
        was_installed = is_installed()
        uninstall()
    try:
        yield
    finally:
        if was_installed:
            install()
