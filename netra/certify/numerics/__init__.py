"""The numerics of each op family, one module per family (netra/certify/numerics/<op>.py).

Each holds the family's TOLERANCES, its test vectors (`cases(params, rows_per_block, large_rows,
seed)`), its float64 reference over a row span (`expected(params, case, a, b)`, from the primitives in
netra.certify.reference) and its judge (`judge(params, expected, got)`). Families that share machinery
(the two quantizers: `quant`; the three fused families: `fused`; the routed MoE's two stages: `moe`)
delegate to it. netra.certify.conformance finds a family's module by its name, so a new family adds its
module and nothing else here.
"""
