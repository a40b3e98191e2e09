// moe_topk_softmax: MoE router top-k softmax for gfx950 (CDNA4, wave64).  Template; netra writes
// the instantiation file (.set EXPERTS/TOPK/NETRA_*/ARG_*, .include, NETRA_KERNEL <symbol>).
//
// Semantics (docs/ops/moe_topk_softmax.md): per row of bf16 logits l[0..E)
//   S    = the TOPK largest logits, descending; equal logits (+0 == -0): lower expert id first
//          (softmax is strictly increasing in the logit, so this is the exact probability order)
//   w[s] = p[s] / sum_{t in S} p[t] = exp(l[s] - l[S0]) / sum_{t in S} exp(l[t] - l[S0])
//   ids[row, s] = S[s] (int32), weights[row, s] = w[s] (fp32), s = 0 .. TOPK-1
//
// Contract constants (checked below at assembly time)
//   EXPERTS      multiple of 64 in [64, 512]     (E; N = E/64 logits per lane)
//   TOPK         1 to 8                          (k)
//   NETRA_BLOCK  multiple of 64 in [64, 1024]    (one wave64 per row, NETRA_BLOCK/64 rows per block)
//   NETRA_VGPRS >= 24, NETRA_SGPRS >= 27 (the .toml says 32 / 40), NETRA_LDS unused (0)
//   ARG_IDS, ARG_WEIGHTS, ARG_LOGITS: 8-aligned; ARG_ROWS 4-aligned and the last argument
//
// Work decomposition: row = workgroup_id_x * (NETRA_BLOCK/64) + wave index; waves with row >= rows
// exit at once.  rows is the only runtime value: every trip count is fixed at assembly time and
// there is no loop and no LDS.
//
// Lane mapping (N = E/64, P = N/2 packed pairs per lane, T = N%2 lone logits per lane)
//   * pairs: lane l holds experts [2P*l, 2P*l + 2P) as P dwords v[8 .. 8+P), dword q = experts
//     2P*l + 2q (bits 15:0) and 2P*l + 2q + 1 (bits 31:16); ONE global_load_dword{,x2,x3,x4} of 4P
//     bytes per lane: the wave reads the first 256P bytes of the row contiguously.
//     E = 128: one global_load_dword, lane l = experts 2l, 2l+1, the whole 256-byte row in one
//     fully coalesced instruction.  (16 lanes x dwordx4 would move the same 256 bytes in the same
//     single instruction and then need a cross-lane redistribution; a dword per lane needs none.)
//     E = 256 / 384 / 512: dwordx2 / dwordx3 / dwordx4 per lane (16-byte loads at E = 512).
//   * T = 1 (E = 64, 192, 320, 448): experts [128P, 128P + 64) one per lane, expert 128P + l, one
//     global_load_ushort (128 contiguous bytes) into v[8+P] bits 15:0.
//   Key slot j of a lane (v[16+j]): j < 2P pair element j (expert 2P*l + j); j = 2P the lone one.
//
// Bytes per row: read 2E (E = 128: 256), write 8*TOPK (k = 8: 32 ids + 32 weights = 64).
// Stores: one global_store_dword per output with EXEC = lanes [0, TOPK): TOPK*4 contiguous bytes in
// one instruction, the same memory transaction as TOPK/4 lanes x dwordx4, without the gather of four
// results into one lane that 16-byte stores would need.
//
// Selection key (32-bit, signed order):  key = ord(l) << 16 | (0xffff - id)
//   ord(l) = the 16-bit two's-complement ordinal of the bf16 sign-magnitude bits: +m -> m,
//   -m -> -m (so -0 and +0 are both 0 and tie, as required), computed for two logits at once:
//     t = sign mask per half (v_pk_ashrrev_i16 15); y = d ^ t; ord = y + 0x7fff*t per half
//     (v_pk_mad_u16; for a negative half: (0x7fff - m) + 0x8001 = -m mod 2^16).
//   Signed key order = logit order, then lower id; keys are unique (ids differ).  Finite and
//   infinite logits order correctly; NaN is outside the contract (a NaN orders by its bits).
// Top-k: TOPK rounds of a wave-wide argmax, with no per-round removal writes:
//   round 0: W0 = max_i32 over all keys;
//   round r: g = key - W(r-1) (mod 2^32) per key, W(r) = W(r-1) + max_u32 g.  Keys below W(r-1)
//   map to [2^32 - W', 2^32) (W' = W(r-1) + 2^31), keys at or above it to [0, 2^32 - W'), and the
//   map is increasing on the first range: the unsigned max is the largest key not yet taken.
//   Wave max: DPP butterfly inside each row of 16 (quad_perm [1,0,3,2], [2,3,0,1],
//   row_half_mirror, row_mirror), then row_bcast:15 and row_bcast:31 fold the rows into lane 63,
//   v_readlane_b32 -> SGPR.  Round r's winner is written to lane r of v6 (v_writelane).
// Weights (lanes 0..TOPK-1 of v6 hold the winners; other lanes the key of -inf, whose e is 0):
//   l_s decoded from the key (exact), d = l_s - l_S0 (v_subrev_f32), x = d * log2(e) (v_mul_f32),
//   e = v_exp_f32(x), Z = sum of the TOPK e by DPP butterfly (bitwise identical in every lane),
//   w = e * v_rcp_f32(Z).
//   The E-wide softmax sum and p = e * rcp(sum) are not computed: the renormalization cancels that
//   common factor exactly (p_s / sum_S p = e_s / sum_S e), so leaving it out removes a wave
//   reduction and two roundings without changing w.
//
// Exact / rounded
//   exact: the row max, the selection and its order, the ids, the decoded logits, d = 0 for s = 0
//          (e_0 = exp2(0) = 1).
//   rounded: d = l_s - l_S0 (fp32 subtraction: exact when the exponents differ by <= 15, else one
//          rounding), x = d * log2(e) (one rounding, relative error of e ~ |d| u), v_exp_f32 (~1 ulp;
//          results below 2^-126 flush to 0), Z (k-1 fp32 additions in butterfly order), v_rcp_f32
//          (<= 1 ulp), w = e * r (one rounding).  |w - w_ref| / w_ref <= (2*Delta + 16) u,
//          Delta = l_S0 - l_S(k-1), u = 2^-24.
//
// Register map
//   s[0:1] kernarg ptr     s2 workgroup id x (= row when NETRA_BLOCK = 64)     s3 64 * wave index
//   s[4:5] ids ptr         s[6:7] weights ptr      s[8:9] logits ptr     s10 rows
//   s11 row (NETRA_BLOCK > 64)    s[12:13] row's logits    s[14:15] row's ids    s[16:17] row's weights
//   s18 W (winner key of the current round)    s19 max g of the round    s20 l_S0 (fp32 bits)
//   s21 0xffff0000    s22 0x7fff7fff    s23 0x80000000    s[24:25] temporaries    s26 0xffff
//   v0 workitem id    v1 lane    v2 lane*4P (pair offset)    v3 lane*4 (store offset; v2 when P = 1)
//   v4 lane*2 (lone-logit offset)    v5 reduction value    v6 winner keys (lane r = round r)
//   v[8:11] raw logits; then g = key - W (v[8 .. 8+N)); epilogue temporaries v[8:15]
//   v[12:15] sign masks while the keys are built    v[16:23] keys (slot j in v[16+j])
//   Highest used: v23 (E = 512; v[16+N-1] in general), s26.  VCC and AGPRs unused.
//
// Cost (E = 128, k = 8): 209 instructions (58 of them s_nop), 1188 bytes of code.  Each round
// after the first: 2 v_subrev, v_max, v_writelane, 6 DPP v_max, v_readlane, s_add, 7 s_nop.
//
// Hazards (gfx940/gfx950 rules, LLVM GCNHazardRecognizer; llvm-mc inserts none).  Checked for every
// EXPERTS x TOPK x NETRA_BLOCK in {64, 256, 1024}: with the template's s_nop removed, LLVM 22's
// post-RA hazard recognizer puts back exactly the same wait states, no more and no fewer.
//   * VALU writes a VGPR -> DPP reads it (as either source): 2 wait states (s_nop 1 between
//     butterfly steps; an independent instruction + s_nop 0 before the first step).
//   * VALU writes a VGPR -> v_readlane reads it: 1 wait state (s_nop 0 before v_readlane).
//   * v_readlane writes an SGPR -> a VALU reads it: 2 wait states.  s18 after round 0 is first read
//     by the 4 SALU instructions that decode l_S0; s19 is only read by SALU (s_add_u32).
//   * trans (v_exp_f32, v_rcp_f32) -> dependent non-trans VALU: 1 wait state.
//   * op_sel/SDWA result forwarding: 1 wait state.  LLVM also counts a VOP3P whose src0 has
//     op_sel_hi = 1 (shared modifier bit); every v_pk_* here takes src0 from an inline constant or
//     SGPR with op_sel_hi:[0,..], so neither reading applies.
//   * SGPRs read by VMEM (bases) are written by SALU only (VALU->SGPR->VMEM needs 5).
//   * EXEC is written once, by SALU, after the last DPP and before the stores; VCC is not used.

.include "include/netra.inc"

// ---------------------------------------------------------------------------------------------
// Assembly-time contract checks.  .Lmoe_topk_softmax_ok stays 1 only when the contract can be
// served; otherwise NETRA_KERNEL emits nothing, so the first error is the only one.
// ---------------------------------------------------------------------------------------------
.set .Lmoe_topk_softmax_ok, 1
.ifndef EXPERTS
  .error "moe_topk_softmax: contract constant EXPERTS is not defined by the instantiation"
  .set .Lmoe_topk_softmax_ok, 0
.else
  .if (EXPERTS % 64) || (EXPERTS < 64) || (EXPERTS > 512)
    .error "moe_topk_softmax: EXPERTS must be a multiple of 64 in [64, 512] (E/64 logits per lane of one wave64)"
    .set .Lmoe_topk_softmax_ok, 0
  .endif
.endif
.ifndef TOPK
  .error "moe_topk_softmax: contract constant TOPK is not defined by the instantiation"
  .set .Lmoe_topk_softmax_ok, 0
.else
  .if (TOPK < 1) || (TOPK > 8)
    .error "moe_topk_softmax: TOPK must be in [1, 8] (winners are kept in lanes 0..7 of one VGPR)"
    .set .Lmoe_topk_softmax_ok, 0
  .endif
.endif
NETRA_CHECK_TARGET moe_topk_softmax, 24, 27
.irp sym, NETRA_BLOCK, NETRA_VGPRS, NETRA_SGPRS, NETRA_ACCUM_OFFSET, NETRA_LDS
  .ifndef \sym
    .set .Lmoe_topk_softmax_ok, 0
  .endif
.endr
.if .Lmoe_topk_softmax_ok
  .if (NETRA_BLOCK % 64) || (NETRA_BLOCK < 64) || (NETRA_BLOCK > 1024) || (NETRA_VGPRS < 24) || (NETRA_SGPRS < 27) || (NETRA_ACCUM_OFFSET < NETRA_VGPRS)
    .set .Lmoe_topk_softmax_ok, 0                    // NETRA_CHECK_TARGET reported it
  .endif
.endif
NETRA_CHECK_ARG moe_topk_softmax, ARG_IDS, 8
NETRA_CHECK_ARG moe_topk_softmax, ARG_WEIGHTS, 8
NETRA_CHECK_ARG moe_topk_softmax, ARG_LOGITS, 8
NETRA_CHECK_ARG moe_topk_softmax, ARG_ROWS, 4
.irp sym, ARG_IDS, ARG_WEIGHTS, ARG_LOGITS, ARG_ROWS
  .ifndef \sym
    .set .Lmoe_topk_softmax_ok, 0
  .endif
.endr
.if .Lmoe_topk_softmax_ok
  .if (ARG_ROWS < ARG_IDS + 8) || (ARG_ROWS < ARG_WEIGHTS + 8) || (ARG_ROWS < ARG_LOGITS + 8)
    .error "moe_topk_softmax: kernel arguments must be ids, weights, logits, rows (rows last)"
    .set .Lmoe_topk_softmax_ok, 0
  .endif
  .ifdef NETRA_KERNARG_BYTES
    .if NETRA_KERNARG_BYTES != ARG_ROWS + 4
      .error "moe_topk_softmax: NETRA_KERNARG_BYTES must be ARG_ROWS + 4"
      .set .Lmoe_topk_softmax_ok, 0
    .endif
  .endif
.endif

// derived constants
.if .Lmoe_topk_softmax_ok
  .set .Lmoe_topk_softmax_n, EXPERTS / 64        // logits per lane
  .set .Lmoe_topk_softmax_p, EXPERTS / 128       // packed bf16 pairs (dwords) per lane
  .set .Lmoe_topk_softmax_t, (EXPERTS / 64) % 2  // 1: one lone logit per lane
  .set .Lmoe_topk_softmax_lone_id, 128 * .Lmoe_topk_softmax_p   // first lone expert id (lane 0)
.endif

// ---------------------------------------------------------------------------------------------
// Helpers (register numbers are absolute expressions)
// ---------------------------------------------------------------------------------------------

// v[dst] = max over the `count` consecutive VGPRs from v[first] (count >= 2); ty = i32 or u32
.macro MOE_TOPK_SOFTMAX_LANEMAX ty, dst, first, count
  .if (\count) == 2
    v_max_\ty v[\dst], v[\first], v[(\first)+1]
  .else
    v_max3_\ty v[\dst], v[\first], v[(\first)+1], v[(\first)+2]
    .set .Lmoe_topk_softmax_i, 3
    .rept ((\count) - 3) / 2
      v_max3_\ty v[\dst], v[\dst], v[(\first)+.Lmoe_topk_softmax_i], v[(\first)+.Lmoe_topk_softmax_i+1]
      .set .Lmoe_topk_softmax_i, .Lmoe_topk_softmax_i + 2
    .endr
    .if ((\count) - 3) % 2
      v_max_\ty v[\dst], v[\dst], v[(\first)+.Lmoe_topk_softmax_i]
    .endif
  .endif
.endm

// Wave-wide max of v[src] -> s[sdst] (the value of lane 63); v[dst] is clobbered.  All 64 lanes
// must be active.  Precondition: v[src] was last written by a VALU >= 2 wait states before.
//   op = max_i32 or max_u32
.macro MOE_TOPK_SOFTMAX_WAVEMAX op, dst, src, sdst
  v_\op\()_dpp v[\dst], v[\src], v[\src] quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
  s_nop 1
  v_\op\()_dpp v[\dst], v[\dst], v[\dst] quad_perm:[2,3,0,1] row_mask:0xf bank_mask:0xf
  s_nop 1
  v_\op\()_dpp v[\dst], v[\dst], v[\dst] row_half_mirror row_mask:0xf bank_mask:0xf
  s_nop 1
  v_\op\()_dpp v[\dst], v[\dst], v[\dst] row_mirror row_mask:0xf bank_mask:0xf    // row max, all lanes
  s_nop 1
  v_\op\()_dpp v[\dst], v[\dst], v[\dst] row_bcast:15 row_mask:0xa bank_mask:0xf  // rows 1,3 += 0,2
  s_nop 1
  v_\op\()_dpp v[\dst], v[\dst], v[\dst] row_bcast:31 row_mask:0xc bank_mask:0xf  // rows 2,3 += lane 31
  s_nop 0
  v_readlane_b32 s[\sdst], v[\dst], 63
.endm

// Two bf16 (or one, in bits 15:0) in v[d] -> 16-bit ordinals in place; v[t] is clobbered.
// Issue the three steps for several dwords interleaved (MOE_TOPK_SOFTMAX_ORD_{A,B,C}).
.macro MOE_TOPK_SOFTMAX_ORD_A d, t
  v_pk_ashrrev_i16 v[\t], 15, v[\d] op_sel_hi:[0,1]         // t = 0xffff per negative half
.endm
.macro MOE_TOPK_SOFTMAX_ORD_B d, t
  v_xor_b32 v[\d], v[\d], v[\t]                              // y = d ^ t
.endm
.macro MOE_TOPK_SOFTMAX_ORD_C d, t
  v_pk_mad_u16 v[\d], s22, v[\t], v[\d] op_sel_hi:[0,1,1]    // y + 0x7fff*t: +m -> m, -m -> -m
.endm

// ---------------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------------
.macro NETRA_KERNEL name
 .if .Lmoe_topk_softmax_ok
  NETRA_KERNEL_BEGIN \name

  // ---- kernel arguments; lane constants while they load ------------------------------------
  s_load_dwordx2 s[8:9], s[0:1], ARG_LOGITS
  s_load_dword s10, s[0:1], ARG_ROWS
  .if ARG_WEIGHTS == ARG_IDS + 8
    s_load_dwordx4 s[4:7], s[0:1], ARG_IDS
  .else
    s_load_dwordx2 s[4:5], s[0:1], ARG_IDS
    s_load_dwordx2 s[6:7], s[0:1], ARG_WEIGHTS
  .endif
  s_mov_b32 s26, 0xffff
  s_mov_b32 s21, 0xffff0000
  s_mov_b32 s22, 0x7fff7fff
  s_brev_b32 s23, 1                                  // 0x80000000
  v_and_b32 v1, 63, v0                               // lane
  // key slots start as 0xffff - id (the low half of every key)
  .if .Lmoe_topk_softmax_p > 0
    v_mad_i32_i24 v16, v1, -2 * .Lmoe_topk_softmax_p, s26   // 0xffff - 2P*lane
    .set .Lmoe_topk_softmax_i, 1
    .rept 2 * .Lmoe_topk_softmax_p - 1
      v_subrev_u32 v[16 + .Lmoe_topk_softmax_i], .Lmoe_topk_softmax_i, v16
      .set .Lmoe_topk_softmax_i, .Lmoe_topk_softmax_i + 1
    .endr
    .if .Lmoe_topk_softmax_p == 1
      v_lshlrev_b32 v2, 2, v1                        // lane * 4
    .elseif .Lmoe_topk_softmax_p == 2
      v_lshlrev_b32 v2, 3, v1                        // lane * 8
    .elseif .Lmoe_topk_softmax_p == 3
      v_mul_u32_u24 v2, 12, v1                       // lane * 12
    .else
      v_lshlrev_b32 v2, 4, v1                        // lane * 16
    .endif
  .endif
  .if .Lmoe_topk_softmax_t
    v_sub_u32 v[16 + 2 * .Lmoe_topk_softmax_p], 0xffff - .Lmoe_topk_softmax_lone_id, v1
    v_lshlrev_b32 v4, 1, v1                          // lane * 2
  .endif
  .if .Lmoe_topk_softmax_p == 1
    .set .Lmoe_topk_softmax_vo, 2                    // store offset = pair offset
  .else
    .set .Lmoe_topk_softmax_vo, 3
    v_lshlrev_b32 v3, 2, v1                          // lane * 4
  .endif
  v_mov_b32 v6, 0x80800000                           // winners: lanes >= TOPK keep the key of -inf
  .if NETRA_BLOCK > 64
    .set .Lmoe_topk_softmax_srow, 11
    NETRA_ROW_INDEX s11, s3                          // row = wg * (NETRA_BLOCK/64) + wave
  .else
    .set .Lmoe_topk_softmax_srow, 2                  // row = workgroup id
  .endif
  s_waitcnt lgkmcnt(0)
  s_cmp_ge_u32 s[.Lmoe_topk_softmax_srow], s10
  s_cbranch_scc1 .Lmoe_topk_softmax_exit\@

  // ---- the row's logits -----------------------------------------------------------------------
  s_mul_i32 s12, s[.Lmoe_topk_softmax_srow], 2 * EXPERTS
  s_mul_hi_u32 s13, s[.Lmoe_topk_softmax_srow], 2 * EXPERTS
  s_add_u32 s12, s8, s12
  s_addc_u32 s13, s9, s13
  .if .Lmoe_topk_softmax_p == 1
    global_load_dword v8, v2, s[12:13]
  .elseif .Lmoe_topk_softmax_p == 2
    global_load_dwordx2 v[8:9], v2, s[12:13]
  .elseif .Lmoe_topk_softmax_p == 3
    global_load_dwordx3 v[8:10], v2, s[12:13]
  .elseif .Lmoe_topk_softmax_p == 4
    global_load_dwordx4 v[8:11], v2, s[12:13]
  .endif
  .if .Lmoe_topk_softmax_t
    global_load_ushort v[8 + .Lmoe_topk_softmax_p], v4, s[12:13] offset:2 * .Lmoe_topk_softmax_lone_id
  .endif
  // output row bases while the loads are in flight (SALU: no VALU->SGPR->VMEM hazard)
  s_mul_i32 s24, s[.Lmoe_topk_softmax_srow], 4 * TOPK
  s_mul_hi_u32 s25, s[.Lmoe_topk_softmax_srow], 4 * TOPK
  s_add_u32 s14, s4, s24
  s_addc_u32 s15, s5, s25
  s_add_u32 s16, s6, s24
  s_addc_u32 s17, s7, s25

  // ---- keys: v[16+j] = ord(logit) << 16 | (0xffff - id) ------------------------------------------
  .if .Lmoe_topk_softmax_p > 0
    .if .Lmoe_topk_softmax_t
      s_waitcnt vmcnt(1)                             // the pairs (loads complete in order)
    .else
      s_waitcnt vmcnt(0)
    .endif
    .irp step, A, B, C
      .set .Lmoe_topk_softmax_i, 0
      .rept .Lmoe_topk_softmax_p
        MOE_TOPK_SOFTMAX_ORD_\step 8+.Lmoe_topk_softmax_i, 12+.Lmoe_topk_softmax_i
        .set .Lmoe_topk_softmax_i, .Lmoe_topk_softmax_i + 1
      .endr
    .endr
    .set .Lmoe_topk_softmax_i, 0
    .rept .Lmoe_topk_softmax_p
      v_lshl_or_b32 v[16 + 2 * .Lmoe_topk_softmax_i], v[8 + .Lmoe_topk_softmax_i], 16, v[16 + 2 * .Lmoe_topk_softmax_i]
      v_and_or_b32 v[17 + 2 * .Lmoe_topk_softmax_i], v[8 + .Lmoe_topk_softmax_i], s21, v[17 + 2 * .Lmoe_topk_softmax_i]
      .set .Lmoe_topk_softmax_i, .Lmoe_topk_softmax_i + 1
    .endr
  .endif
  .if .Lmoe_topk_softmax_t
    s_waitcnt vmcnt(0)
    MOE_TOPK_SOFTMAX_ORD_A 8+.Lmoe_topk_softmax_p, 12+.Lmoe_topk_softmax_p
    MOE_TOPK_SOFTMAX_ORD_B 8+.Lmoe_topk_softmax_p, 12+.Lmoe_topk_softmax_p
    MOE_TOPK_SOFTMAX_ORD_C 8+.Lmoe_topk_softmax_p, 12+.Lmoe_topk_softmax_p
    v_lshl_or_b32 v[16 + 2 * .Lmoe_topk_softmax_p], v[8 + .Lmoe_topk_softmax_p], 16, v[16 + 2 * .Lmoe_topk_softmax_p]
  .endif

  // ---- round 0: W0 = max_i32 of all keys ----------------------------------------------------------
  .if .Lmoe_topk_softmax_n == 1
    s_nop 1
    MOE_TOPK_SOFTMAX_WAVEMAX max_i32, 5, 16, 18
  .else
    MOE_TOPK_SOFTMAX_LANEMAX i32, 5, 16, .Lmoe_topk_softmax_n
    s_nop 1
    MOE_TOPK_SOFTMAX_WAVEMAX max_i32, 5, 5, 18
  .endif
  // l_S0 (fp32 bits) from W0: sign | |ord| << 16.  SALU only; these 4 instructions are also the 2
  // wait states between the v_readlane that wrote s18 and the next VALU that reads it.
  s_and_b32 s20, s18, s21
  s_abs_i32 s24, s20
  s_and_b32 s20, s20, s23
  s_or_b32 s20, s20, s24

  // ---- rounds 1 .. TOPK-1: W += max_u32(key - W) --------------------------------------------------
  .set .Lmoe_topk_softmax_r, 1
  .rept TOPK - 1
    .if .Lmoe_topk_softmax_r >= 2
      s_add_u32 s18, s18, s19                        // W(r-1)
    .endif
    .if .Lmoe_topk_softmax_n == 1
      v_subrev_u32 v5, s18, v16
    .else
      .set .Lmoe_topk_softmax_i, 0
      .rept .Lmoe_topk_softmax_n
        v_subrev_u32 v[8 + .Lmoe_topk_softmax_i], s18, v[16 + .Lmoe_topk_softmax_i]
        .set .Lmoe_topk_softmax_i, .Lmoe_topk_softmax_i + 1
      .endr
      MOE_TOPK_SOFTMAX_LANEMAX u32, 5, 8, .Lmoe_topk_softmax_n
    .endif
    v_writelane_b32 v6, s18, .Lmoe_topk_softmax_r - 1   // winner r-1 -> lane r-1
    s_nop 0
    MOE_TOPK_SOFTMAX_WAVEMAX max_u32, 5, 5, 19
    .set .Lmoe_topk_softmax_r, .Lmoe_topk_softmax_r + 1
  .endr
  .if TOPK > 1
    s_add_u32 s18, s18, s19
  .endif
  v_writelane_b32 v6, s18, TOPK - 1

  // ---- weights in lanes 0 .. TOPK-1 ---------------------------------------------------------------
  v_and_b32 v8, s21, v6                              // k = ord << 16 (signed)
  v_sub_u32 v9, 0, v8
  v_max_i32 v10, v8, v9                              // |ord| << 16 = magnitude bits
  v_bfi_b32 v11, s23, v8, v10                        // logit as fp32 (exact)
  v_subrev_f32 v12, s20, v11                         // d = l - l_S0 (<= 0)
  v_mul_f32 v12, 0x3fb8aa3b, v12                     // x = d * log2(e)
  v_exp_f32 v13, v12                                 // e = 2^x
  v_not_b32 v14, v6
  v_and_b32 v15, 0xffff, v14                         // id = 0xffff - (key & 0xffff)
  .if TOPK == 1
    v_rcp_f32 v9, v13
  .else
    v_add_f32_dpp v8, v13, v13 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
    .if TOPK > 2
      s_nop 1
      v_add_f32_dpp v8, v8, v8 quad_perm:[2,3,0,1] row_mask:0xf bank_mask:0xf
    .endif
    .if TOPK > 4
      s_nop 1
      v_add_f32_dpp v8, v8, v8 row_half_mirror row_mask:0xf bank_mask:0xf
    .endif
    v_rcp_f32 v9, v8                                 // 1 / Z
  .endif
  s_mov_b64 exec, (1 << TOPK) - 1                    // also the trans -> VALU wait state
  v_mul_f32 v10, v13, v9                             // w = e / Z
  global_store_dword v[.Lmoe_topk_softmax_vo], v15, s[14:15]
  global_store_dword v[.Lmoe_topk_softmax_vo], v10, s[16:17]
.Lmoe_topk_softmax_exit\@:
  s_endpgm
  NETRA_KERNEL_END \name

  .ifdef NETRA_KERNARG_BYTES
    NETRA_KERNEL_DESCRIPTOR \name, NETRA_KERNARG_BYTES
  .else
    NETRA_KERNEL_DESCRIPTOR \name, ARG_ROWS + 4
  .endif
 .endif
.endm
