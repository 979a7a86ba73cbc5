"""``%cudainfo``: the PyTorch / CUDA / driver / GPU picture with findings.

Modules:
    magic: the IPython front (``InfoSettings``, ``InfoMagics``).
    facts: gathering the facts (Python, PyTorch, NVML, nvcc, environment) as one dict; ``collect``.
    versions: parsers for version strings, cuDNN's integer and ``CUDA_VISIBLE_DEVICES``.
    findings: diagnostics (severity, cause, fix) from the facts, and the wheel/driver tables.
    report: the report object, rendered as text and HTML.
"""
