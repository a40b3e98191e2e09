"""Tensors as the float64 reference's formats, for the torch tests' bit-for-bit comparisons: bf16 as its
uint16 patterns, FP8 as its uint8 codes (netra.certify.reference takes and returns those). Imported by the
tests that need torch, after their importorskip."""

from __future__ import annotations

import numpy as np
import torch


def bf16(bits: np.ndarray, device: str = "cpu") -> torch.Tensor:
    """The bf16 tensor whose bit patterns are `bits` (uint16), on `device`."""
    t = torch.from_numpy(np.ascontiguousarray(bits, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)
    return t if device == "cpu" else t.to(device)


def bits16(t: torch.Tensor) -> np.ndarray:
    """A 16-bit tensor's bit patterns as uint16, on the host."""
    return t.detach().contiguous().cpu().view(torch.int16).numpy().view(np.uint16)


def codes(q: torch.Tensor) -> np.ndarray:
    """An FP8 tensor's codes as uint8, on the host."""
    return q.detach().contiguous().cpu().view(torch.uint8).numpy()


def host(t: torch.Tensor) -> np.ndarray:
    """Any output in the reference's format: bf16 as uint16, FP8 as uint8, others as they are."""
    if t.dtype == torch.bfloat16:
        return bits16(t)
    if t.dtype == torch.float8_e4m3fn:
        return codes(t)
    return t.detach().contiguous().cpu().numpy()
