"""On an H100 / H200 (sm_90): DeepSeek-V3's router kernel (moe_grouped_topk_sigmoid, tactics gw1 and gw4,
`experiment`: not yet run on a GPU when this test was written) on every conformance case, each tactic
through the runtime's raw launch, judged against the float64 reference (near ties within the derived
bounds, weights within 2^-19); both tactics bit-identical (one warp per token either way: batch
invariant), and netra.torch at the `experiment` policy serving it, functional and out=, with the same
bytes.

    NETRA_TEST_INSTALLED=1 /path/to/venv/bin/pytest tests/test_gpu_grouped_router.py -v

against an installed wheel built from this tree (its sm_90 table lists the contract). Skipped elsewhere
(the gpu marker; CI has no GPU).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("torch_state")]

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

LARGE = int(os.environ.get("NETRA_TEST_LARGE_ROWS", "8192"))
DEV = "cuda:0"
OP = "moe_grouped_topk_sigmoid"
P = {"experts": 256, "topk": 8, "groups": 8, "topk_groups": 4}
KEY = "moe_grouped_topk_sigmoid(experts=256,topk=8,groups=8,topk_groups=4)"
TACTICS = ("gw1", "gw4")


def _launch(kernel: Any, case: Any, x: Any, b: Any) -> dict[str, np.ndarray]:
    from netra.loaders.cuda import Cuda

    ids = torch.empty(case.rows, P["topk"], dtype=torch.int32, device=DEV)
    w = torch.empty(case.rows, P["topk"], dtype=torch.float32, device=DEV)
    ids.view(torch.uint8).fill_(0xA5)  # a pattern the kernel must overwrite everywhere
    w.view(torch.uint8).fill_(0xA5)
    args = {
        "ids": ids.data_ptr(),
        "weights": w.data_ptr(),
        "logits": x.data_ptr(),
        "bias": b.data_ptr(),
        "rows": case.rows,
        "scale": case.scalars["scale"],
    }
    Cuda().launch(kernel, case.rows, None, args)
    torch.cuda.synchronize()
    return {"ids": ids.cpu().numpy(), "weights": w.cpu().numpy()}


def test_every_tactic_passes_every_case_and_the_operator_serves_it() -> None:
    import netra.torch as nt
    from netra.certify import conformance as cf
    from netra.runtime import open_catalog

    if torch.cuda.get_device_capability(0) != (9, 0):
        pytest.skip("needs an sm_90 GPU (H100 / H200)")
    cat = open_catalog("sm_90")
    kernels = {t: cat.select(KEY, "experiment", tactic=t) for t in TACTICS}
    assert all(kernels.values()), kernels
    prev = nt.set_policy("experiment")
    try:
        for case in cf.cases(OP, P, rows_per_block=4, large_rows=LARGE):
            x = torch.from_numpy(case.inputs["logits"]).to(DEV)
            b = torch.from_numpy(case.inputs["bias"]).to(DEV)
            exp = cf.expected(OP, P, case, workers=os.cpu_count() or 1)
            got = {t: _launch(k, case, x, b) for t, k in kernels.items()}
            for t, g in got.items():
                v = cf.judge(OP, P, case, g, exp)
                assert v.passed, f"{case.name} ({t}): {v.reason}"
                print(
                    f"{case.name} rows={case.rows} {t}: {v.counts} weights {v.max_rel_deviation:.3g} <= {v.tolerance:.3g}"
                )
            for name in ("ids", "weights"):
                assert np.array_equal(got["gw1"][name].view(np.uint8), got["gw4"][name].view(np.uint8)), (
                    case.name
                )
            ids, w = nt.moe_grouped_topk_sigmoid(x, b, 8, 8, 4, case.scalars["scale"])
            oi, ow = torch.full_like(ids, -1), torch.full_like(w, float("nan"))
            nt.moe_grouped_topk_sigmoid(x, b, 8, 8, 4, case.scalars["scale"], out=(oi, ow))
            for name, a, c in (("ids", ids, oi), ("weights", w, ow)):
                mine = a.cpu().numpy()
                assert np.array_equal(mine.view(np.uint8), got["gw1"][name].view(np.uint8)), (case.name, name)
                assert np.array_equal(c.cpu().numpy().view(np.uint8), mine.view(np.uint8)), (case.name, name)
        assert set(nt.stats()) == {KEY} and set(nt.stats()[KEY]) == {"certified"}
    finally:
        nt.set_policy(prev)
