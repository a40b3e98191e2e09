// netra template fp8_group_quant (gfx950 / CDNA4, wave64)
//
//   q[r, i]        = fp8_e4m3fn( clamp(x[r, i] * v_rcp(scale[r, i/128]), -448, 448) )  (RNE)
//   scales[r, g]   = max(max_{i in group g} |x[r, i]|, 1e-10f) / 448   (fp32, correctly rounded)
//   x: bf16 [rows, HIDDEN], q: u8 [rows, HIDDEN] (E4M3FN codes), scales: f32 [rows, HIDDEN/128]
// Numerics and their rounding are documented in include/fp8.inc (exact amax, exactly rounded
// scale, v_rcp_f32 reciprocal <= 1 ulp, clamp then RNE conversion).
//
// Kernel arguments (kernarg order): q u8*, scales f32*, x bf16*, rows u32.
// Contract constants: HIDDEN (multiple of 128 in [128, 65536]), GROUP (must be 128).
// Tactic: NETRA_BLOCK threads = NETRA_BLOCK/64 rows per workgroup, one wave64 per row; waves whose
// row >= rows exit at once.  No LDS, no scratch.
//
// Mapping: a row is processed in chunks of 1024 elements (nch = ceil(HIDDEN/1024)).  In a chunk,
// lane L owns the 16 contiguous elements [16L, 16L+16): two 16-byte loads (x bytes 32L and
// 32L+16 of the chunk), one 16-byte store of 16 FP8 codes (q bytes 16L), and the 8 lanes
// 8g..8g+7 form quantization group g; lane 8g stores scale g (one dword).  When HIDDEN % 1024 != 0
// the last chunk runs with EXEC = lanes [0, (HIDDEN % 1024)/16) (whole groups).
// Pipelining: 5 chunk buffers in flight (loads for chunk i+5 are issued as soon as chunk i has
// been unpacked); rows of at least 20 chunks (+tail) run the steady part as a loop (pipeline.inc).
// Bytes moved per row: 2*HIDDEN read, HIDDEN + 4*HIDDEN/128 written (one pass, x read once).
//
// Register map
//   v0        lane id (0..63)                 s[0:1]  kernarg pointer
//   v1        x byte offset  = 32*lane        s2      workgroup id -> row
//   v2        q byte offset  = 16*lane        s3,s11  temporaries
//   v3        scale offset   = lane/2 (4*group on group-leader lanes)
//   v4        amax -> scale                   s[4:5]  q cursor (row base, +1024 per chunk)
//   v5        temporary                       s[6:7]  scales cursor (row base, +32 per chunk)
//   v[6:7]    1/scale (v6), pair for pk_mul   s[8:9]  x cursor (row base, +2048 per chunk)
//   v[8:23]   16 fp32 values (fp8.inc F layout), then the 16 FP8 bytes in v[8:11]
//   v[24:63]  5 load buffers of 8 dwords (16 bf16)
//                                             s10 rows, s12 0xffff0000, s13 448.0f,
//                                             s14 loop counter, s15 RN(1/448),
//                                             s[16:17] group-leader exec mask (lane%8==0),
//                                             s[18:19] tail exec mask, s[20:21] tail leaders
// VGPRs used: v0..v63 (64: 8 waves per SIMD).  SGPRs used: s0..s21 (22), no VCC.

.include "include/netra.inc"
.include "include/fp8.inc"
.include "include/pipeline.inc"

// ---- contract checks ----
NETRA_REQUIRE_DEFINED fp8_group_quant, HIDDEN
NETRA_REQUIRE_DEFINED fp8_group_quant, GROUP
.ifdef HIDDEN
  .if (HIDDEN % 128) || (HIDDEN < 128) || (HIDDEN > 65536)
    .error "fp8_group_quant: HIDDEN must be a multiple of 128 in [128, 65536] (got a value outside)"
  .endif
.endif
.ifdef GROUP
  .if GROUP != 128
    .error "fp8_group_quant: GROUP must be 128 (only 128-element groups are implemented)"
  .endif
.endif
NETRA_CHECK_TARGET fp8_group_quant, 64, 22
NETRA_CHECK_ARG fp8_group_quant, ARG_Q, 8
NETRA_CHECK_ARG fp8_group_quant, ARG_SCALES, 8
NETRA_CHECK_ARG fp8_group_quant, ARG_X, 8
NETRA_CHECK_ARG fp8_group_quant, ARG_ROWS, 4

// ---- geometry ----
.set .Lfq_nch, (HIDDEN + 1023) / 1024
.set .Lfq_tail_lanes, (HIDDEN % 1024) / 16
.set .Lfq_tail, 0
.if .Lfq_tail_lanes
  .set .Lfq_tail, 1
.endif
.set .Lfq_nb, 5
.set .Lfq_buf, 24            // first VGPR of the load buffers (slot s: v[24+8s .. 24+8s+7])

// FQ_LOAD slot, is_tail: 2 x 16-byte loads of the next chunk into buffer `slot`
.macro FQ_LOAD slot, is_tail
  .if \is_tail
    s_mov_b64 exec, s[18:19]
  .endif
  global_load_dwordx4 v[.Lfq_buf + 8*(\slot) : .Lfq_buf + 8*(\slot) + 3], v1, s[8:9]
  global_load_dwordx4 v[.Lfq_buf + 8*(\slot) + 4 : .Lfq_buf + 8*(\slot) + 7], v1, s[8:9] offset:16
  NETRA_VM_OPS 2
  NETRA_VM_MARK x, \slot
  s_add_u32 s8, s8, 2048
  s_addc_u32 s9, s9, 0
  .if \is_tail
    s_mov_b64 exec, -1
  .endif
.endm

// FQ_ITER slot, ld, ntail, ctail: quantize the chunk in buffer `slot`
.macro FQ_ITER slot, ld, ntail, ctail
  NETRA_VM_WAIT x, \slot
  .if \ctail
    s_mov_b64 exec, s[18:19]
  .endif
  NETRA_FP8_UNPACK16_BF16 8, (.Lfq_buf+8*(\slot)), s12
  .if \ld
    FQ_LOAD \slot, \ntail            // buffer is free again: prefetch chunk i+5 into it
  .endif
  .if \ctail
    NETRA_FP8_QUANT_CHUNK 8, 4, 5, 6, s13, s15, 3, 6, 2, 4, 20, s[18:19]
  .else
    NETRA_FP8_QUANT_CHUNK 8, 4, 5, 6, s13, s15, 3, 6, 2, 4, 16, -1
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
  v_lshlrev_b32 v2, 4, v0
  v_lshrrev_b32 v3, 1, v0
  s_mov_b32 s12, 0xffff0000
  NETRA_FP8_CONSTS s13, s15
  s_mov_b32 s16, 0x01010101
  s_mov_b32 s17, 0x01010101
  .if .Lfq_tail
    NETRA_EXEC_LANES s18, s19, .Lfq_tail_lanes
    s_and_b64 s[20:21], s[18:19], s[16:17]
  .endif
  s_waitcnt lgkmcnt(0)
  s_cmp_ge_u32 s2, s10
  s_cbranch_scc1 .L\name\()_exit
  NETRA_ROW_BASE s8, s9, s2, (HIDDEN*2), s3, s11
  NETRA_ROW_BASE s4, s5, s2, HIDDEN, s3, s11
  NETRA_ROW_BASE s6, s7, s2, (HIDDEN/32), s3, s11
  NETRA_PIPELINE .Lfq_nch, .Lfq_nb, .Lfq_tail, FQ_LOAD, FQ_ITER, s14
.L\name\()_exit:
  s_endpgm
  NETRA_KERNEL_END \name
  NETRA_KERNEL_DESCRIPTOR \name, (ARG_ROWS+4)
.endm
