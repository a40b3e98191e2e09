"""What runs on a serving host: the install's release data, read and checked, and the certified kernels.

    from netra.runtime import open_catalog
    cat = open_catalog("sm_90")                        # or open_catalog(): the detected GPU's class
    k = cat.select("rmsnorm(hidden=4096,weight_offset=0)")
    if k:                                              # a Kernel; a Fallback is falsy and says why
        k.grid(rows), k.block, k.pack(y=..., rows=...), k.code_object, k.symbol

The public API is this package's names (docs/runtime.md). Its modules: catalog (the runtime's Catalog,
open_catalog), contract, installed (which install this is), lockfile and layout (the lock and
build.json, read), tables (the certified table format), kernarg, gpus (detection). Nothing here
imports release-time code (netra.release) or a GPU runtime (netra.loaders).
"""

# The errors the runtime raises, importable from here as they always were (defined in netra.errors).
from netra.errors import (
    AlteredFileError,
    ArgumentTypeError,
    ContractError,
    MissingFileError,
    NetraError,
    NoGPUError,
    TableError,
    UncertifiedGPUClassError,
)
from netra.runtime.catalog import (
    DEFAULT_POLICY,
    POLICIES,
    Catalog,
    Fallback,
    Kernel,
    certified_classes,
    choose,
    clear_cache,
    installed_lock,
    open_catalog,
)
from netra.runtime.contract import Contract, as_contract

__all__ = [
    "DEFAULT_POLICY",
    "POLICIES",
    "AlteredFileError",
    "ArgumentTypeError",
    "Catalog",
    "Contract",
    "ContractError",
    "Fallback",
    "Kernel",
    "MissingFileError",
    "NetraError",
    "NoGPUError",
    "TableError",
    "UncertifiedGPUClassError",
    "as_contract",
    "certified_classes",
    "choose",
    "clear_cache",
    "installed_lock",
    "open_catalog",
]
