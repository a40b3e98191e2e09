// netra template silu_mul_fp8_quant (gfx950 / CDNA4, wave64)
//
//   g = x[r, i], u = x[r, INTER + i]            (x: bf16 [rows, 2*INTER] laid out [gate | up])
//   h = silu(g) * u = (g * rcp(1 + exp(-g))) * u  in fp32
//   q[r, i], scales[r, i/128] = the fp8_group_quant quantization of h (include/fp8.inc)
//
// Numerics of the activation (all fp32; bf16 -> fp32 unpack is exact):
//   t = g * RN(-log2 e)              (-log2 e = 0xbfb8aa3b; t carries one fp32 rounding, so
//                                     exp(-g) is off by |t| * 2^-24 relative on top of v_exp)
//   e = v_exp_f32(t) = 2^t           (hardware exp2, ~1 ulp)
//   s = g * v_rcp_f32(1 + e)         (1 + e rounded once; hardware reciprocal <= 1 ulp; i.e. a
//                                     few ulp from the exact g / (1 + exp(-g)) overall)
//   h = s * u                        (one rounding)
//   Limits: g -> -inf gives e = +inf, rcp = 0, s = -0; g -> +inf gives e = 0, s = g.
//   Then per group of 128 h values: exact amax, correctly rounded scale = max(amax,1e-10f)/448,
//   q = fp8_e4m3fn_rne(clamp(h * v_rcp_f32(scale), -448, 448)).  h is NOT rounded to bf16 first.
//
// Kernel arguments (kernarg order): q u8*, scales f32*, x bf16*, rows u32.
// Contract constants: INTER (multiple of 128 in [128, 32768]), GROUP (must be 128).
// Tactic: NETRA_BLOCK threads = NETRA_BLOCK/64 rows per workgroup, one wave64 per row; waves whose
// row >= rows exit at once.  No LDS, no scratch.
//
// Mapping: chunks of 1024 output elements (nch = ceil(INTER/1024)).  Lane L owns elements
// [16L, 16L+16) of the chunk: 2 x 16-byte loads of gate (x bytes 32L, 32L+16 of the chunk) and
// 2 x 16-byte loads of up (same + 2*INTER), one 16-byte store of 16 FP8 codes; lanes 8g..8g+7 are
// quantization group g and lane 8g stores its scale.  INTER % 1024 != 0: the last chunk runs with
// EXEC = lanes [0, (INTER % 1024)/16) (whole groups).
// Pipelining: 2 chunk buffers (gate+up) in flight; the gate loads of chunk i+2 are issued right
// after the gate of chunk i is unpacked, the up loads after the up of chunk i is unpacked; long rows
// run the steady part as a loop (pipeline.inc).  One pass: gate and up are read exactly once.
// Bytes moved per row: 4*INTER read, INTER + 4*INTER/128 written.
//
// Register map
//   v0       lane id                          s[0:1]  kernarg pointer
//   v1       gate byte offset = 32*lane       s2      workgroup id -> row
//   v2       up byte offset = 32*lane+2*INTER s3,s11  temporaries
//   v3       q byte offset = 16*lane          s[4:5]  q cursor (+1024 per chunk)
//   v4       scale offset = lane/2            s[6:7]  scales cursor (+32 per chunk)
//   v5       amax -> scale                    s[8:9]  x cursor (+2048 per chunk; gate and up)
//   v[6:7]   1/scale (v6); v7 temporary       s10 rows, s12 0xffff0000, s13 448.0f,
//   v[8:23]  16 fp32 (F layout): g -> silu(g) -> h -> FP8 bytes in v[8:11]
//   v[24:39] 16 fp32 (same layout): -g*log2e -> exp -> 1+e -> rcp -> u
//   v[40:71] 2 buffers: slot s = gate v[40+16s .. +7], up v[48+16s .. +7] (16 bf16 each)
//                                             s14 loop counter, s15 RN(1/448),
//                                             s[16:17] group-leader exec mask,
//                                             s[18:19] tail exec mask, s[20:21] tail leaders,
//                                             s22 RN(-log2 e) (s[22:23] is the pk_mul operand;
//                                             s23 is read but unused)
// VGPRs used: v0..v71 (72).  SGPRs used: s0..s23 (24), no VCC.

.include "include/netra.inc"
.include "include/fp8.inc"
.include "include/pipeline.inc"

// ---- contract checks ----
NETRA_REQUIRE_DEFINED silu_mul_fp8_quant, INTER
NETRA_REQUIRE_DEFINED silu_mul_fp8_quant, GROUP
.ifdef INTER
  .if (INTER % 128) || (INTER < 128) || (INTER > 32768)
    .error "silu_mul_fp8_quant: INTER must be a multiple of 128 in [128, 32768] (got a value outside)"
  .endif
.endif
.ifdef GROUP
  .if GROUP != 128
    .error "silu_mul_fp8_quant: GROUP must be 128 (only 128-element groups are implemented)"
  .endif
.endif
NETRA_CHECK_TARGET silu_mul_fp8_quant, 72, 24
NETRA_CHECK_ARG silu_mul_fp8_quant, ARG_Q, 8
NETRA_CHECK_ARG silu_mul_fp8_quant, ARG_SCALES, 8
NETRA_CHECK_ARG silu_mul_fp8_quant, ARG_X, 8
NETRA_CHECK_ARG silu_mul_fp8_quant, ARG_ROWS, 4

// ---- geometry ----
.set .Lsq_nch, (INTER + 1023) / 1024
.set .Lsq_tail_lanes, (INTER % 1024) / 16
.set .Lsq_tail, 0
.if .Lsq_tail_lanes
  .set .Lsq_tail, 1
.endif
.set .Lsq_nb, 2
.set .Lsq_buf, 40            // slot s: gate v[40+16s .. 47+16s], up v[48+16s .. 55+16s]
.set .Lsq_F, 8
.set .Lsq_X, 24

// gate loads of the next chunk into `slot`
.macro SQ_LOADG slot, is_tail
  .if \is_tail
    s_mov_b64 exec, s[18:19]
  .endif
  global_load_dwordx4 v[.Lsq_buf + 16*(\slot) : .Lsq_buf + 16*(\slot) + 3], v1, s[8:9]
  global_load_dwordx4 v[.Lsq_buf + 16*(\slot) + 4 : .Lsq_buf + 16*(\slot) + 7], v1, s[8:9] offset:16
  NETRA_VM_OPS 2
  NETRA_VM_MARK g, \slot
  .if \is_tail
    s_mov_b64 exec, -1
  .endif
.endm

// up loads of the same chunk into `slot`, then advance the x cursor to the next chunk
.macro SQ_LOADU slot, is_tail
  .if \is_tail
    s_mov_b64 exec, s[18:19]
  .endif
  global_load_dwordx4 v[.Lsq_buf + 16*(\slot) + 8 : .Lsq_buf + 16*(\slot) + 11], v2, s[8:9]
  global_load_dwordx4 v[.Lsq_buf + 16*(\slot) + 12 : .Lsq_buf + 16*(\slot) + 15], v2, s[8:9] offset:16
  NETRA_VM_OPS 2
  NETRA_VM_MARK u, \slot
  s_add_u32 s8, s8, 2048
  s_addc_u32 s9, s9, 0
  .if \is_tail
    s_mov_b64 exec, -1
  .endif
.endm

// prologue: gate and up of the next chunk (one EXEC switch for a tail chunk)
.macro SQ_LOAD slot, is_tail
  .if \is_tail
    s_mov_b64 exec, s[18:19]
  .endif
  SQ_LOADG \slot, 0
  SQ_LOADU \slot, 0
  .if \is_tail
    s_mov_b64 exec, -1
  .endif
.endm

// process the chunk in `slot`
.macro SQ_ITER slot, ld, ntail, ctail
  NETRA_VM_WAIT g, \slot
  .if \ctail
    s_mov_b64 exec, s[18:19]
  .endif
  NETRA_FP8_UNPACK16_BF16 .Lsq_F, (.Lsq_buf+16*(\slot)), s12      // F = g
  .if \ld
    SQ_LOADG \slot, \ntail                 // gate buffer free: prefetch gate of chunk i+2
  .endif
  .irp p, 0,2,4,6,8,10,12,14
    v_pk_mul_f32 v[.Lsq_X+\p:.Lsq_X+\p+1], v[.Lsq_F+\p:.Lsq_F+\p+1], s[22:23] op_sel_hi:[1,0]  // -g*log2e
  .endr
  .irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    v_exp_f32 v[.Lsq_X+\i], v[.Lsq_X+\i]                                     // e = exp(-g)
  .endr
  // first VALU use of an exp result is >= 14 instructions after it (trans forwarding hazard: 1)
  .irp p, 0,2,4,6,8,10,12,14
    v_pk_add_f32 v[.Lsq_X+\p:.Lsq_X+\p+1], v[.Lsq_X+\p:.Lsq_X+\p+1], 1.0 op_sel_hi:[1,0]   // 1 + e
  .endr
  .irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    v_rcp_f32 v[.Lsq_X+\i], v[.Lsq_X+\i]                                     // 1 / (1 + e)
  .endr
  // first VALU use of an rcp result is >= 14 instructions after it
  .irp p, 0,2,4,6,8,10,12,14
    v_pk_mul_f32 v[.Lsq_F+\p:.Lsq_F+\p+1], v[.Lsq_F+\p:.Lsq_F+\p+1], v[.Lsq_X+\p:.Lsq_X+\p+1]  // silu(g)
  .endr
  NETRA_VM_WAIT u, \slot
  NETRA_FP8_UNPACK16_BF16 .Lsq_X, (.Lsq_buf+16*(\slot)+8), s12    // X = u
  .if \ld
    SQ_LOADU \slot, \ntail                 // up buffer free: prefetch up of chunk i+2
  .endif
  .irp p, 0,2,4,6,8,10,12,14
    v_pk_mul_f32 v[.Lsq_F+\p:.Lsq_F+\p+1], v[.Lsq_F+\p:.Lsq_F+\p+1], v[.Lsq_X+\p:.Lsq_X+\p+1]  // h
  .endr
  .if \ctail
    NETRA_FP8_QUANT_CHUNK .Lsq_F, 5, 7, 6, s13, s15, 4, 6, 3, 4, 20, s[18:19]
  .else
    NETRA_FP8_QUANT_CHUNK .Lsq_F, 5, 7, 6, s13, s15, 4, 6, 3, 4, 16, -1
  .endif
.endm

.macro NETRA_KERNEL name
  NETRA_KERNEL_BEGIN \name
  s_load_dwordx2 s[4:5], s[0:1], ARG_Q
  s_load_dwordx2 s[6:7], s[0:1], ARG_SCALES
  s_load_dwordx2 s[8:9], s[0:1], ARG_X
  s_load_dword s10, s[0:1], ARG_ROWS
  NETRA_ROW_INDEX s2, s3                   // reads v0 before it is overwritten
  v_and_b32 v0, 63, v0
  v_lshlrev_b32 v1, 5, v0
  v_add_u32 v2, (INTER*2), v1
  v_lshlrev_b32 v3, 4, v0
  v_lshrrev_b32 v4, 1, v0
  s_mov_b32 s12, 0xffff0000
  NETRA_FP8_CONSTS s13, s15
  s_mov_b32 s16, 0x01010101
  s_mov_b32 s17, 0x01010101
  s_mov_b32 s22, 0xbfb8aa3b                // RN(-log2 e)
  .if .Lsq_tail
    NETRA_EXEC_LANES s18, s19, .Lsq_tail_lanes
    s_and_b64 s[20:21], s[18:19], s[16:17]
  .endif
  s_waitcnt lgkmcnt(0)
  s_cmp_ge_u32 s2, s10
  s_cbranch_scc1 .L\name\()_exit
  NETRA_ROW_BASE s8, s9, s2, (INTER*4), s3, s11
  NETRA_ROW_BASE s4, s5, s2, INTER, s3, s11
  NETRA_ROW_BASE s6, s7, s2, (INTER/32), s3, s11
  NETRA_PIPELINE .Lsq_nch, .Lsq_nb, .Lsq_tail, SQ_LOAD, SQ_ITER, s14
.L\name\()_exit:
  s_endpgm
  NETRA_KERNEL_END \name
  NETRA_KERNEL_DESCRIPTOR \name, (ARG_ROWS+4)
.endm
