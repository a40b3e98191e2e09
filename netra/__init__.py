"""Netra: ahead-of-time, locked and certified GPU kernels.

Importing netra is deliberately cheap: it reads no tables, hashes nothing and probes no GPU.
Everything heavier lives in submodules that are imported on first use.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
