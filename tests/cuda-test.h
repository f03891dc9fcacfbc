/* What the CUDA op tests (cuda-test-*.c), the benchmarks (cuda-bench.c) and test-backend-cuda.c's main share;
 * defined in cuda-test-util.c. */
#ifndef PPX_CUDA_TEST_H
#define PPX_CUDA_TEST_H

#include <math.h>

#include "../kernels/backend-cuda.h"
#include "manifest.h"
#include "personaplex-internal.h"
#include "quant.h"
#include "test-util.h"

/* max |gpu - cpu| <= TOL * max(1, max |cpu|) for ops whose arithmetic differs in order (test-backend-cuda.c) */
#define TOL 1e-5

extern PpxBackend *cpu, *gpu; /* the reference and the backend under test */
extern GRand *rng;            /* seeded in main: every run draws the same inputs */

/* ---- paired tensors: the same data on both backends ---- */
typedef struct {
  PpxTensor *c, *g;
  gsize n;
  PpxTensorType type;
} Pair;

Pair pair_new (PpxTensorType type, gsize n, const void *host);
void pair_free (Pair *p);
float *random_floats (gsize n, double lo, double hi);
Pair pair_random (gsize n);
Pair pair_i32 (gsize n, const int32_t *v);
/* max |gpu - cpu| and (scale) max(1, max |cpu|) */
double pair_err (const Pair *p, double *scale);
void assert_close (const Pair *p, double tol, const char *what);
void assert_same (const Pair *p, const char *what);
void assert_gpu_bits_equal (const Pair *a, const Pair *b, const char *what, const char *b_how);

/* ---- paired weights ---- */
typedef struct {
  PpxWeight *c, *g;
} WPair;

typedef struct {
  PpxWeightFormat format;
  int group_size;
} Fmt;

#define N_FORMATS 8
extern const Fmt formats[N_FORMATS];
WPair wpair_random (Fmt f, int64_t rows, int64_t cols);
void wpair_free (WPair *p);
const char *fmt_name (Fmt f);

#define N_KV_FORMATS 3
extern const PpxKvFormat kv_formats[N_KV_FORMATS];

/* ---- the convolutions of one Mimi frame ---- */
typedef struct {
  char name[48];
  gboolean tr, streaming, bias;
  int Cin, Cout, K, stride, dil, L, groups; /* L: input length (conv1d) or frames T (transposed) per call */
  PpxActivation act;                        /* the ELU fused into the conv (ppx_seanet_forward) */
  gboolean res;                             /* residual added in place (y = y + conv) */
} MimiConv;


int mimi_convs (gboolean decoder, MimiConv *out, int max);
gsize mc_state_row (const MimiConv *c);
gsize mc_out_row (const MimiConv *c);
gsize mc_w_elems (const MimiConv *c);
void mc_run (PpxBackend *be, const MimiConv *c, const PpxTensor *w, const PpxTensor *b, const PpxTensor *x,
             PpxTensor *st, PpxTensor *y, int M);
Pair mc_weights (const MimiConv *c);
void mc_describe (const MimiConv *c, int M, char *buf, gsize n);

/* ---- the tests (g_test functions) ---- */
void test_memory (void);
void test_elementwise (void);
void test_vq (void);
void test_sample (void);
void test_force_tokens (void);
void test_linear (void);
void test_linear_batch (void);
void test_linear_batch_slices (void);
void test_linear_gemv (void);
void test_linear_wgmma_path (void);
void test_rmsnorm_linear (void);
void test_silu_gate_linear (void);
void test_layer_tail (void);
void test_embed (void);
void test_pdl_chain (void);
void test_rope (void);
void test_attention (void);
void test_conv1d (void);
void test_conv_transpose1d (void);
void test_conv_mimi (void);
void test_conv_batch (void);
void test_conv_pieces (void);
void test_golden (void);
void test_prefill (void);

/* ---- the benchmarks (cuda-bench.c): exit codes ---- */
int run_bench (const char *only, const char *shape);
int run_bench_attention (void);
int run_bench_conv (void);
int run_bench_conv_sweep (int argc, char **argv);

#endif
