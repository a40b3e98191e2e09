// netra template rmsnorm (gfx950 / CDNA4, wave64)
//
//   y[r, :] = bf16_rne( (x[r, :] * rs) * (w + WEIGHT_OFFSET) ),  rs = rsqrt(mean(x[r, :]^2) + eps)
//   x, y: bf16 [rows, HIDDEN]; w: bf16 [HIDDEN]; all arithmetic in fp32.
//
// Numerics
//   * x, w unpacked to fp32 exactly; per-lane sum of squares with v_pk_fma_f32 (two fp32
//     accumulators per lane: even and odd elements), combined, then a butterfly wave sum
//     (include/wave.inc): a few fp32 roundings, order differs from a sequential sum.
//   * mean = sum * c, c = fp32(1/HIDDEN) as an immediate: exact when HIDDEN is a power of two,
//     otherwise 1/HIDDEN correctly rounded to fp32 (e.g. 3584 -> 0x39924925), so the product
//     carries up to two roundings (c and the multiply).  c is computed at assembly time by
//     integer arithmetic (checked against exact rationals for every multiple of 128 <= 65536).
//   * rs = v_rsq_f32(mean + eps): one fp32 add, hardware reciprocal square root (~1 ulp).
//   * WEIGHT_OFFSET = 0: y = RN(RN(x*rs) * w).
//     WEIGHT_OFFSET = 1: y = RN(t*w + t) with t = RN(x*rs) (v_pk_fma_f32), i.e. t*(w+1) with one
//     rounding; identical to RN(t * RN(w+1)) whenever w + 1 is exact in fp32 (every bf16 w with
//     2^-16 <= |w| < 2^24, and w = 0), otherwise closer to the exact value.
//   * bf16 output: v_cvt_pk_bf16_f32, round to nearest even (include/bf16.inc).
//
// Kernel arguments (kernarg order): y bf16*, x bf16*, w bf16*, rows u32, eps f32.
// Contract constants: HIDDEN (multiple of 128 in [128, 16384]), WEIGHT_OFFSET (0 or 1).
// Tactic: NETRA_BLOCK threads = NETRA_BLOCK/64 rows per workgroup, one wave64 per row; waves whose
// row >= rows exit at once.  No LDS, no scratch.
//
// Mapping: a row is split in chunks of 512 elements (nch = ceil(HIDDEN/512)); in chunk k lane L
// owns elements 512k + 8L .. 512k + 8L + 7 (one 16-byte load/store, 4 dwords of packed bf16).
// When HIDDEN % 512 != 0 the last chunk runs with EXEC = lanes [0, (HIDDEN % 512)/8).
// Schedule (all straight-line, assembler-time trip counts):
//   A. issue loads of x chunks 0..nres-1 into registers (nres = min(nch, 16): HIDDEN <= 8192 keeps
//      the whole row of x in VGPRs, HIDDEN/128 VGPRs per lane), then the first nw entries of the
//      "ring stream" (below)
//   B. sum of squares chunk by chunk as data arrives (s_waitcnt with exact counts)
//   C. wave reduction, rs
//   D. per chunk: y = ... written in place over the x registers, one 16-byte store per lane
// Ring stream (nw slots of 4 VGPRs): first the x chunks nres..nch-1 that do not fit in registers
// (HIDDEN > 8192 only), then w chunks 0..nch-1; a slot is refilled with entry j+nw as soon as
// entry j has been consumed.  nw = min(stream length, 21 - nres): for HIDDEN <= 5120 all of w is
// loaded up front (HIDDEN = 8192: 5 slots).  For HIDDEN > 8192, x chunks 16.. are read twice
// (phase B through the ring; phase D reloads chunk k into the x registers of chunk k-16 right
// after y chunk k-16 has been stored).
// Phase D interleaves two dwords (RN_OUT2) so no VALU consumes a v_pk_* result in the next slot.
// Bytes moved per row: HIDDEN <= 8192: 2*HIDDEN read (x) + 2*HIDDEN written (y) + 2*HIDDEN of w
// (same for every row: L2 resident); HIDDEN > 8192: + 2*(HIDDEN - 8192) extra x read.
//
// Register map
//   v0        lane id                          s[0:1]  kernarg pointer
//   v1        byte offset 16*lane              s2      workgroup id -> row
//   v[2:3]    sum of squares (even, odd) ->    s3,s13,s14 temporaries
//             v2 = rs, pair operand of pk_mul  s[4:5]  y row base (cursor)
//   v[4:11]   temporaries (two sets of 4)      s[6:7]  x row base (cursor)
//   v[12 .. 12+4*nres-1]  x chunks (packed bf16), then y in place
//   v[12+4*nres .. +4*nw-1] ring slots         s[8:9]  w base (cursor)
//                                              s10 rows, s11 eps, s12 0xffff0000,
//                                              s[16:17] tail exec mask
// VGPRs used: at most v0..v95 (96: 5 waves per SIMD, the same occupancy as any count in 88..96).
// SGPRs used: s0..s17 (18), no VCC.

.include "include/netra.inc"
.include "include/wave.inc"
.include "include/bf16.inc"

// ---- contract checks ----
NETRA_REQUIRE_DEFINED rmsnorm, HIDDEN
NETRA_REQUIRE_DEFINED rmsnorm, WEIGHT_OFFSET
.ifdef HIDDEN
  .if (HIDDEN % 128) || (HIDDEN < 128) || (HIDDEN > 16384)
    .error "rmsnorm: HIDDEN must be a multiple of 128 in [128, 16384] (got a value outside)"
  .endif
.endif
.ifdef WEIGHT_OFFSET
  .if (WEIGHT_OFFSET != 0) && (WEIGHT_OFFSET != 1)
    .error "rmsnorm: WEIGHT_OFFSET must be 0 or 1 (got a value outside)"
  .endif
.endif
NETRA_CHECK_TARGET rmsnorm, 96, 18
NETRA_CHECK_ARG rmsnorm, ARG_Y, 8
NETRA_CHECK_ARG rmsnorm, ARG_X, 8
NETRA_CHECK_ARG rmsnorm, ARG_W, 8
NETRA_CHECK_ARG rmsnorm, ARG_ROWS, 4
NETRA_CHECK_ARG rmsnorm, ARG_EPS, 4

// ---- geometry ----
.set .Lrn_nch, (HIDDEN + 511) / 512
.set .Lrn_tail_lanes, (HIDDEN % 512) / 8
.set .Lrn_tail, 0
.if .Lrn_tail_lanes
  .set .Lrn_tail, 1
.endif
NETRA_SET_MIN .Lrn_nres, .Lrn_nch, 16
.set .Lrn_nstr, .Lrn_nch - .Lrn_nres            // x chunks streamed through the ring
.set .Lrn_nitems, .Lrn_nstr + .Lrn_nch          // ring stream length
NETRA_SET_MIN .Lrn_nw, .Lrn_nitems, (21-.Lrn_nres)
.set .Lrn_X, 12
.set .Lrn_W, .Lrn_X + 4 * .Lrn_nres
.if (.Lrn_W + 4 * .Lrn_nw) > 96
  .error "rmsnorm: internal error, VGPR plan exceeds 96"
.endif

// ---- c = fp32(1/HIDDEN), correctly rounded, as bits.  HIDDEN = m * 2^k, m odd <= 127:
// 1/m = (p/m) * 2^-lg(p) with p = 2^lg(p) the next power of two >= m; significand
// round(2^23 * p/m) (never a tie for odd m > 1); then subtract k from the exponent.
.set .Lrn_m, HIDDEN
.set .Lrn_k2, 0
.rept 16
  .if (.Lrn_m % 2) == 0
    .set .Lrn_m, .Lrn_m / 2
    .set .Lrn_k2, .Lrn_k2 + 1
  .endif
.endr
.if .Lrn_m == 1
  .set .Lrn_invm, 127 << 23
.else
  .set .Lrn_p, 1
  .set .Lrn_lg, 0
  .rept 8
    .if .Lrn_p < .Lrn_m
      .set .Lrn_p, .Lrn_p * 2
      .set .Lrn_lg, .Lrn_lg + 1
    .endif
  .endr
  .set .Lrn_sig, (((1 << 24) * .Lrn_p) / .Lrn_m + 1) / 2
  .set .Lrn_invm, ((127 - .Lrn_lg) << 23) | (.Lrn_sig - (1 << 23))
.endif
.set .Lrn_inv_h, .Lrn_invm - (.Lrn_k2 << 23)

// ---- helpers ----
.macro RN_TAIL_ON chunk
  .if .Lrn_tail && ((\chunk) == (.Lrn_nch - 1))
    s_mov_b64 exec, s[16:17]
  .endif
.endm
.macro RN_TAIL_OFF chunk
  .if .Lrn_tail && ((\chunk) == (.Lrn_nch - 1))
    s_mov_b64 exec, -1
  .endif
.endm

// RN_LOAD arr, chunk, vreg, bank, slot: 16-byte load of chunk `chunk` of x (arr = x) or w
// (arr = w) into v[vreg:vreg+3], recorded as (bank, slot).  Arguments: symbols / expressions
// without spaces.
.macro RN_LOAD arr, chunk, vreg, bank, slot
  RN_TAIL_ON \chunk
  .set .Lrn_t, (\chunk) * 1024
  .ifc \arr, x
    NETRA_SBASE_REACH s6, s7, .Lrn_xcur, .Lrn_t
    .set .Lrn_o, .Lrn_t - .Lrn_xcur
    global_load_dwordx4 v[\vreg:(\vreg)+3], v1, s[6:7] offset:.Lrn_o
  .else
    NETRA_SBASE_REACH s8, s9, .Lrn_wcur, .Lrn_t
    .set .Lrn_o, .Lrn_t - .Lrn_wcur
    global_load_dwordx4 v[\vreg:(\vreg)+3], v1, s[8:9] offset:.Lrn_o
  .endif
  NETRA_VM_OPS 1
  NETRA_VM_MARK \bank, \slot
  RN_TAIL_OFF \chunk
.endm

// RN_LOAD_ITEM j: ring stream entry j into ring slot j % nw
.macro RN_LOAD_ITEM j
  .set .Lrn_islot, (\j) % .Lrn_nw
  .set .Lrn_ireg, .Lrn_W + 4 * .Lrn_islot
  .if (\j) < .Lrn_nstr
    .set .Lrn_ichunk, .Lrn_nres + (\j)
    RN_LOAD x, .Lrn_ichunk, .Lrn_ireg, w, .Lrn_islot
  .else
    .set .Lrn_ichunk, (\j) - .Lrn_nstr
    RN_LOAD w, .Lrn_ichunk, .Lrn_ireg, w, .Lrn_islot
  .endif
.endm

// RN_SUMSQ4 r: v[2:3] += squares of the 8 bf16 in v[r:r+3] (even elements -> v2, odd -> v3)
.macro RN_SUMSQ4 r
  .irp d, 0,1,2,3
    .if (\d % 2) == 0
      NETRA_BF16_UNPACK2 4, 5, ((\r)+\d), s12
      v_pk_fma_f32 v[2:3], v[4:5], v[4:5], v[2:3]
    .else
      NETRA_BF16_UNPACK2 6, 7, ((\r)+\d), s12
      v_pk_fma_f32 v[2:3], v[6:7], v[6:7], v[2:3]
    .endif
  .endr
.endm

// RN_OUT4 xr, wr: v[xr:xr+3] = bf16( (x * rs) * (w + WEIGHT_OFFSET) ), rs in v2.
// Two dwords at a time with two temporary sets (A = v[4:7], B = v[8:11]) so that no VALU
// consumes the result of a v_pk_* in the next instruction: LLVM's gfx940+ dst-sel forwarding rule
// (GCNHazardRecognizer getDstSelForwardingOperand) treats every VOP3P with op_sel_hi[src0] set as
// a producer needing 1 wait state before a VALU that reads or writes its vdst.
.macro RN_OUT2 xr, wr, d
  NETRA_BF16_UNPACK2 4, 5, ((\xr)+(\d)), s12
  NETRA_BF16_UNPACK2 8, 9, ((\xr)+(\d)+1), s12
  v_pk_mul_f32 v[4:5], v[4:5], v[2:3] op_sel_hi:[1,0]          // tA = x * rs
  NETRA_BF16_UNPACK2 6, 7, ((\wr)+(\d)), s12
  v_pk_mul_f32 v[8:9], v[8:9], v[2:3] op_sel_hi:[1,0]          // tB = x * rs
  NETRA_BF16_UNPACK2 10, 11, ((\wr)+(\d)+1), s12
  .if WEIGHT_OFFSET
    v_pk_fma_f32 v[4:5], v[4:5], v[6:7], v[4:5]                 // tA*w + tA = tA*(w+1)
    v_pk_fma_f32 v[8:9], v[8:9], v[10:11], v[8:9]
  .else
    v_pk_mul_f32 v[4:5], v[4:5], v[6:7]                         // tA*w
    v_pk_mul_f32 v[8:9], v[8:9], v[10:11]
  .endif
  NETRA_BF16_PACK_RNE ((\xr)+(\d)), 4, 5
  NETRA_BF16_PACK_RNE ((\xr)+(\d)+1), 8, 9
.endm
.macro RN_OUT4 xr, wr
  RN_OUT2 \xr, \wr, 0
  RN_OUT2 \xr, \wr, 2
.endm

.macro NETRA_KERNEL name
  .set .Lrn_xcur, 0
  .set .Lrn_wcur, 0
  .set .Lrn_ycur, 0
  NETRA_KERNEL_BEGIN \name
  s_load_dwordx2 s[4:5], s[0:1], ARG_Y
  s_load_dwordx2 s[6:7], s[0:1], ARG_X
  s_load_dwordx2 s[8:9], s[0:1], ARG_W
  s_load_dword s10, s[0:1], ARG_ROWS
  s_load_dword s11, s[0:1], ARG_EPS
  NETRA_ROW_INDEX s2, s3                   // reads v0 before it is overwritten
  v_and_b32 v0, 63, v0
  v_lshlrev_b32 v1, 4, v0
  s_mov_b32 s12, 0xffff0000
  .if .Lrn_tail
    NETRA_EXEC_LANES s16, s17, .Lrn_tail_lanes
  .endif
  s_waitcnt lgkmcnt(0)
  s_cmp_ge_u32 s2, s10
  s_cbranch_scc1 .L\name\()_exit
  s_mul_i32 s13, s2, HIDDEN * 2            // row byte offset (64-bit) for x and y
  s_mul_hi_u32 s14, s2, HIDDEN * 2
  s_add_u32 s6, s6, s13
  s_addc_u32 s7, s7, s14
  s_add_u32 s4, s4, s13
  s_addc_u32 s5, s5, s14

  // ---- A: issue the loads ----
  .set .Lrn_c, 0
  .rept .Lrn_nres
    .set .Lrn_creg, .Lrn_X + 4 * .Lrn_c
    RN_LOAD x, .Lrn_c, .Lrn_creg, x, .Lrn_c
    .set .Lrn_c, .Lrn_c + 1
  .endr
  .set .Lrn_c, 0
  .rept .Lrn_nw
    RN_LOAD_ITEM .Lrn_c
    .set .Lrn_c, .Lrn_c + 1
  .endr

  // ---- B: sum of squares ----
  v_mov_b32 v2, 0
  v_mov_b32 v3, 0
  .set .Lrn_c, 0
  .rept .Lrn_nch
    .if .Lrn_c < .Lrn_nres
      NETRA_VM_WAIT x, .Lrn_c
      .set .Lrn_breg, .Lrn_X + 4 * .Lrn_c
    .else
      .set .Lrn_bj, .Lrn_c - .Lrn_nres
      .set .Lrn_bslot, .Lrn_bj % .Lrn_nw
      NETRA_VM_WAIT w, .Lrn_bslot
      .set .Lrn_breg, .Lrn_W + 4 * .Lrn_bslot
    .endif
    RN_TAIL_ON .Lrn_c
    RN_SUMSQ4 .Lrn_breg
    RN_TAIL_OFF .Lrn_c
    .if .Lrn_c >= .Lrn_nres
      .if (.Lrn_bj + .Lrn_nw) < .Lrn_nitems
        .set .Lrn_bj2, .Lrn_bj + .Lrn_nw
        RN_LOAD_ITEM .Lrn_bj2             // ring slot consumed: refill it
      .endif
    .endif
    .set .Lrn_c, .Lrn_c + 1
  .endr

  // ---- C: rs = rsqrt(sum/HIDDEN + eps), in every lane ----
  .if .Lrn_tail == 0                       // (with a tail, the EXEC restore is the wait state)
    s_nop 0                                // v_pk_fma v[2:3] result -> VALU: 1 wait state (dst-sel rule)
  .endif
  v_add_f32 v2, v2, v3
  NETRA_WAVE_SUM_F32 2, 3
  v_mul_f32 v2, .Lrn_inv_h, v2             // mean = sum * fp32(1/HIDDEN)
  v_add_f32 v2, s11, v2
  v_rsq_f32 v2, v2                         // first VALU read of v2 is >= 2 instructions later

  // ---- D: y = (x * rs) * (w + WEIGHT_OFFSET) ----
  .set .Lrn_c, 0
  .rept .Lrn_nch
    .if .Lrn_c < .Lrn_nres
      .set .Lrn_dxs, .Lrn_c
    .else
      .set .Lrn_dxs, .Lrn_c - .Lrn_nres
    .endif
    .set .Lrn_dj, .Lrn_nstr + .Lrn_c
    .set .Lrn_dws, .Lrn_dj % .Lrn_nw
    NETRA_VM_WAIT2 x, .Lrn_dxs, w, .Lrn_dws
    .set .Lrn_dxr, .Lrn_X + 4 * .Lrn_dxs
    .set .Lrn_dwr, .Lrn_W + 4 * .Lrn_dws
    RN_TAIL_ON .Lrn_c
    RN_OUT4 .Lrn_dxr, .Lrn_dwr
    .set .Lrn_t, .Lrn_c * 1024
    NETRA_SBASE_REACH s4, s5, .Lrn_ycur, .Lrn_t
    .set .Lrn_o, .Lrn_t - .Lrn_ycur
    global_store_dwordx4 v1, v[.Lrn_dxr:.Lrn_dxr+3], s[4:5] offset:.Lrn_o
    NETRA_VM_OPS 1
    // (the tail chunk is the last one: nothing follows it, EXEC is left as is)
    .if (.Lrn_dj + .Lrn_nw) < .Lrn_nitems
      .set .Lrn_dj2, .Lrn_dj + .Lrn_nw
      RN_LOAD_ITEM .Lrn_dj2                // w ring slot consumed: refill it
    .endif
    .if .Lrn_c < .Lrn_nstr
      // HIDDEN > 8192: reload x chunk 16+c into the registers the store above just read.
      // A store reads its data at issue (VMEM -> VMEM WAR needs no wait on gfx9), but with
      // XNACK on, a store and a later load that overwrites its data must not share a soft
      // clause (a replay would store the new data): s_nop 0 breaks the clause.
      s_nop 0
      .set .Lrn_rc, .Lrn_nres + .Lrn_c
      RN_LOAD x, .Lrn_rc, .Lrn_dxr, x, .Lrn_c
    .endif
    .set .Lrn_c, .Lrn_c + 1
  .endr
.L\name\()_exit:
  s_endpgm
  NETRA_KERNEL_END \name
  NETRA_KERNEL_DESCRIPTOR \name, (ARG_EPS+4)
.endm
