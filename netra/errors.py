"""One error hierarchy, so callers can catch NetraError and users always get a fix with the problem.

Every error renders as a single line: what went wrong (naming the file, artifact or GPU class), then
the hint that fixes it. The CLI and the build hook print exactly this line and exit non-zero.
"""

from __future__ import annotations


class NetraError(Exception):
    """Base class: a message naming the object at fault and a hint with the fix.

    `details` holds one line per problem when an error lists several (the CLI prints them one per
    line under the message); `str()` stays one line.
    """

    def __init__(self, message: str, hint: str | None = None, details: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = tuple(details)

    def __str__(self) -> str:
        return f"{self.message}; hint: {self.hint}" if self.hint else self.message


class UsageError(NetraError):
    """A name or number typed on the command line that is none of the valid choices: exit status 2."""


class ManifestError(NetraError):
    """A model manifest, template manifest or tactic list is malformed or inconsistent."""


class LockError(NetraError):
    """release/manifest.lock is missing, unreadable, or out of date with the sources."""


class ToolchainError(NetraError):
    """A GPU class's toolchain (its assembler and linker, or its CUDA compiler) is missing, cannot
    target the class, or failed to run; the message names the class and the tool."""


class AssemblyError(NetraError):
    """A template instantiation failed to assemble or link."""


class TextMismatchError(NetraError):
    """An artifact's .text differs from the hash the lock records."""


class ValidationError(NetraError):
    """A code object breaks its contract or the GPU's limits."""


class IntegrityError(NetraError):
    """An installed or built file the lock lists is missing or altered."""


class MissingFileError(IntegrityError):
    """A file the lock lists is absent."""


class AlteredFileError(IntegrityError):
    """A file the lock lists has a different sha256 (or .text sha256) than locked."""


class UncertifiedGPUClassError(NetraError):
    """The GPU class asked for has no certified table in this install."""


class RuntimeUnavailableError(NetraError):
    """The GPU runtime library (HIP, CUDA driver) needed to load a kernel is not present."""


class WheelGateError(NetraError):
    """A built wheel does not carry exactly the locked files."""


class HipError(NetraError):
    """A HIP call failed; the message carries hipGetErrorName/hipGetErrorString."""


class CudaError(NetraError):
    """A CUDA driver call failed; the message carries cuGetErrorName/cuGetErrorString."""


class CertificationError(NetraError):
    """`netra certify` cannot run, or its result cannot be written (not a kernel's failed check)."""


class KernargError(NetraError, ValueError):
    """Kernel arguments that do not fit the kernel's kernarg layout (missing, extra, or out of range)."""


class LaunchError(NetraError, ValueError):
    """A launch an op family's record describes cannot be computed: a malformed size expression, a value
    it names that was not given, a division that is not exact, or a grid or workspace out of range."""


class ContractError(NetraError, ValueError):
    """A malformed request: a contract with the wrong parameters for its op, or an unknown policy."""


class ArgumentTypeError(ContractError, TypeError):
    """An argument of the wrong type at the Python API (open_catalog, select, Contract, netra.torch).

    Also a ContractError, so a caller that catches malformed requests catches it, and a TypeError, as
    Python's own calls raise for a wrong type. The message names the call and the argument.
    """


class TableError(NetraError):
    """A certified table breaks the table format (docs/tables.md): the release itself is wrong."""


class NoGPUError(UncertifiedGPUClassError):
    """No GPU class was given and none was detected: there is nothing to open a catalog for."""


class PathError(NetraError):
    """A path that must not be followed or read: malformed, outside the tree, a symlink, not a regular file."""


class FileTooLargeError(NetraError):
    """A file over the size limit for what it should be (netra/core/files.py): refused instead of read whole."""


class UnreadableFileError(NetraError):
    """A file that exists but cannot be read: permission denied, an I/O error, or text that is not UTF-8."""


class ToolError(NetraError):
    """An external tool (llvm-mc, ld.lld, llvm-objdump, nvcc) could not be run to completion."""


class ToolTimeoutError(ToolError):
    """A tool ran past its time limit; it was killed with its whole process group."""


class ToolCrashError(ToolError):
    """A tool was killed by a signal (SIGSEGV, SIGABRT, ...) instead of exiting."""


class ToolOutputError(ToolError):
    """A tool printed more on stdout than the caller's limit; it was killed rather than truncated."""


class ToolInterruptedError(ToolError):
    """A tool was killed because netra itself is being interrupted (SIGINT, SIGTERM, SIGHUP)."""


class BusyError(NetraError):
    """Another netra process holds the write lock this one needs, and waiting for it timed out."""


class StrictModeError(NetraError):
    """netra.torch strict mode: a call would have run the PyTorch composite instead of a certified kernel.

    The message names the contract and the fallback reason; `contract`, `code` and `reason` carry them.
    """

    def __init__(
        self, message: str, hint: str | None = None, *, contract: str = "", code: str = "", reason: str = ""
    ) -> None:
        super().__init__(message, hint)
        self.contract = contract
        self.code = code
        self.reason = reason


class IntegrationError(NetraError, ValueError):
    """An engine integration (netra.integrations) was given something it cannot serve: the message names
    the model or module, the hint the fix; nothing was changed."""
