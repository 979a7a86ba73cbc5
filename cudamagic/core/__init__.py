"""Shared pieces every area imports and that import no area.

The ``NA`` value (:mod:`.na`), the one NVML seam (:mod:`.nvml`), the one nvcc finder
(:mod:`.nvcc`), escaping, units and tables (:mod:`.fmt`), and the base of each area's ``Magics``
class (:mod:`.magic`).
"""
