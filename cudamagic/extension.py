"""Loading and unloading cudamagic: one ``Magics`` class per area, one place for settings.

``%load_ext cudamagic`` builds the :class:`CudaMagics` configurable (every user setting, reachable
as ``%config CudaMagics.<name>`` and ``c.CudaMagics.<name>`` in ``ipython_config.py``), then
registers each area's ``Magics`` class (``info``, ``watch``, ``graph``, ``mem``, ``prof``,
``explain``, ``cuda``), as IPython registers the classes of ``IPython/core/magics/``. Each area
registers cleanups (threads, event callbacks) that ``%unload_ext cudamagic`` runs in reverse order
before it removes every magic of ours.

Importing this module imports IPython and traitlets but neither torch nor pynvml.
"""

from __future__ import annotations

from traitlets import TraitError
from traitlets.config import Configurable

from .core import nvml
from .cuda.magic import CudaCellMagics, CudaSettings
from .explain.magic import ExplainMagics, ExplainSettings
from .fit.magic import FitMagics, FitSettings
from .graph.magic import GraphMagics, GraphSettings
from .info.magic import InfoMagics, InfoSettings
from .mem.magic import MemMagics, MemSettings
from .overview import OverviewMagics, collect, load_message
from .prof.magic import ProfMagics, ProfSettings
from .watch.magic import WatchMagics, WatchSettings

#: area name -> its Magics class, in registration order.
AREAS = {
    "info": InfoMagics,
    "watch": WatchMagics,
    "graph": GraphMagics,
    "mem": MemMagics,
    "prof": ProfMagics,
    "explain": ExplainMagics,
    "cuda": CudaCellMagics,
    "fit": FitMagics,
    "overview": OverviewMagics,
}


class CudaMagics(
    InfoSettings,
    WatchSettings,
    GraphSettings,
    MemSettings,
    ProfSettings,
    ExplainSettings,
    CudaSettings,
    FitSettings,
    Configurable,
):
    """Every cudamagic setting, in one place for users.

    ``%config CudaMagics`` lists them, ``%config CudaMagics.watch_interval_s = 0.5`` sets one.
    Each area declares its own settings (with units in the names) in its ``magic.py``; this class
    only gathers them.
    """


class Extension:
    """The loaded extension: the settings, each area's magics, and the cleanups.

    Attributes:
        shell: the ``InteractiveShell``.
        settings: the :class:`CudaMagics` configurable.
        magics: area name -> that area's ``Magics`` instance
            (``ext.magics["explain"].last_explanation``).
    """

    def __init__(self, shell):
        self.shell = shell
        self._cleanups = []
        self.settings = _construct_settings(shell)
        self.magics = {
            name: cls(shell, self.settings, self.add_cleanup) for name, cls in AREAS.items()
        }

    def add_cleanup(self, func):
        """Register ``func()`` to run on ``%unload_ext cudamagic`` (in reverse order)."""
        self._cleanups.append(func)
        return func

    def shutdown(self):
        """Run every registered cleanup; the first error is raised after all ran."""
        errors = []
        while self._cleanups:
            func = self._cleanups.pop()
            try:
                func()
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)
        if errors:
            raise errors[0]


_ACTIVE: Extension | None = None  # the extension loaded on the running shell


def current() -> Extension | None:
    """The loaded :class:`Extension`, or None (not loaded, or unloaded)."""
    return _ACTIVE


def _construct_settings(ipython) -> CudaMagics:
    """Build CudaMagics; a config value its trait rejects is dropped with a warning.

    The value comes from ``%config`` or ``ipython_config.py``; ``%load_ext`` does not fail on it.
    """
    try:
        return CudaMagics(parent=ipython)
    except TraitError:
        pass
    section = ipython.config.CudaMagics
    saved = dict(section)
    for key in saved:
        del section[key]
    settings = CudaMagics(parent=ipython)
    for key, value in saved.items():
        try:
            setattr(settings, key, value)
            section[key] = value
        except TraitError as exc:
            trait = settings.traits().get(key)
            helptext = f" ({trait.help})" if trait is not None and trait.help else ""
            default = getattr(settings, key)
            why = str(exc).rstrip(".")
            print(
                f"cudamagic: ignoring CudaMagics.{key} = {value!r}: {why}. Using the default "
                f"{default!r}{helptext}. Fix it with %config CudaMagics.{key} = <value>."
            )
        except AttributeError:
            section[key] = value
    return settings


def load(ipython) -> Extension:
    """Register the magics on ``ipython`` (idempotent: a second load replaces the first)."""
    global _ACTIVE
    if _ACTIVE is not None:
        unload(_ACTIVE.shell)
    ext = Extension(ipython)
    ipython.configurables.append(ext.settings)
    ext.add_cleanup(lambda: _remove(ipython.configurables, ext.settings))
    ext.add_cleanup(nvml.reset)  # a later load re-reads NVML (`%pip install nvidia-ml-py`)
    for magics in ext.magics.values():
        ipython.register_magics(magics)
        magics.on_load()
    ext.magics["overview"].areas = tuple(ext.magics.values())
    _ACTIVE = ext
    print(load_message(collect(ext.magics.values())))
    return ext


def _remove(items: list, item) -> None:
    while item in items:
        items.remove(item)


def unload(ipython) -> None:
    """Stop threads, remove callbacks and unregister every magic of ours."""
    global _ACTIVE
    ext, _ACTIVE = _ACTIVE, None
    if ext is None:
        return
    ours = set(map(id, ext.magics.values()))
    try:
        ext.shutdown()
    finally:
        registry = ipython.magics_manager.magics
        for kind in ("line", "cell"):
            for name, func in list(registry[kind].items()):
                if id(getattr(func, "__self__", None)) in ours:
                    del registry[kind][name]
        for magics in ext.magics.values():
            ipython.magics_manager.registry.pop(type(magics).__name__, None)
            _remove(ipython.configurables, magics)
