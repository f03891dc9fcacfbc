/* ppx_op_layer_tail (the depformer's layer after its attention, and the projection after it): the persistent
 * kernel (ppx_backend_cuda_fuse_tail (1)) gives the bits of the same op run one op at a time on the GPU, for every
 * format (those it does not take run the ops either way), M = 1 .. 128, with and without the next norm; and the
 * CPU's result within TOL. */
#include "cuda-test.h"

typedef struct {
  Pair att, x, norm2, next_norm, h, ff, u, y;
} TailActs;

static Pair
pair_copy (const Pair *p)
{
  g_autofree float *v = g_new (float, p->n);
  ppx_tensor_download (p->g, 0, v, p->n);
  return pair_new (PPX_TENSOR_F32, p->n, v);
}

static void
tail_acts_free (TailActs *a)
{
  Pair *ps[] = {&a->att, &a->x, &a->norm2, &a->next_norm, &a->h, &a->ff, &a->u, &a->y};
  for (guint i = 0; i < G_N_ELEMENTS (ps); i++)
    pair_free (ps[i]);
}

static PpxLayerTail
tail_of (TailActs *a, gboolean gpu_side, WPair *w, gboolean norm)
{
#define T(p) (gpu_side ? (p).g : (p).c)
#define WT(p) (gpu_side ? (p).g : (p).c)
  return (PpxLayerTail){.att = T (a->att),
                        .out_proj = WT (w[0]),
                        .linear_in = WT (w[1]),
                        .linear_out = WT (w[2]),
                        .next = WT (w[3]),
                        .x = T (a->x),
                        .norm2 = T (a->norm2),
                        .next_norm = norm ? T (a->next_norm) : NULL,
                        .h = T (a->h),
                        .ff = T (a->ff),
                        .u = T (a->u),
                        .y = T (a->y),
                        .eps = 1e-8f};
#undef T
#undef WT
}

static void
check_layer_tail (Fmt f, int64_t d, int64_t F, int64_t n, gboolean norm, const int *ms, int n_ms)
{
  WPair w[4] = {wpair_random (f, d, d), wpair_random (f, 2 * F, d), wpair_random (f, d, F), wpair_random (f, n, d)};
  for (int i = 0; i < n_ms; i++) {
    const int M = ms[i];
    TailActs a = {.att = pair_random ((gsize) M * d),
                  .x = pair_random ((gsize) M * d),
                  .norm2 = pair_random ((gsize) d),
                  .next_norm = pair_random ((gsize) d),
                  .h = pair_random ((gsize) M * d),
                  .ff = pair_random ((gsize) M * 2 * F),
                  .u = pair_random ((gsize) M * F),
                  .y = pair_random ((gsize) M * n)};
    /* the unfused run's tensors: the same inputs */
    TailActs b = {.att = pair_copy (&a.att),
                  .x = pair_copy (&a.x),
                  .norm2 = pair_copy (&a.norm2),
                  .next_norm = pair_copy (&a.next_norm),
                  .h = pair_copy (&a.h),
                  .ff = pair_copy (&a.ff),
                  .u = pair_copy (&a.u),
                  .y = pair_copy (&a.y)};
    PpxLayerTail tc = tail_of (&a, FALSE, w, norm), tg = tail_of (&a, TRUE, w, norm), tu = tail_of (&b, TRUE, w, norm);
    ppx_op_layer_tail (cpu, &tc, M);
    ppx_backend_cuda_fuse_tail (1);
    ppx_op_layer_tail (gpu, &tg, M);
    ppx_backend_cuda_fuse_tail (0);
    ppx_op_layer_tail (gpu, &tu, M);
    ppx_backend_cuda_fuse_tail (-1);
    g_autofree char *what = g_strdup_printf ("layer_tail %s d=%" G_GINT64_FORMAT " F=%" G_GINT64_FORMAT
                                             " next=%" G_GINT64_FORMAT "%s M=%d",
                                             fmt_name (f), d, F, n, norm ? " (norm)" : "", M);
    g_autofree char *wx = g_strdup_printf ("%s: x", what), *wff = g_strdup_printf ("%s: ff", what);
    g_autofree char *wy = g_strdup_printf ("%s: y", what);
    /* four dependent ops, each within TOL of the CPU; the norms between them rescale the earlier ops' errors
     * (measured on an H200: up to 1.02e-5 relative, int4 g128 on the golden shapes, the ops one by one) */
    assert_close (&a.x, 5 * TOL, wx);
    assert_close (&a.y, 5 * TOL, wy);
    assert_gpu_bits_equal (&a.x, &b.x, wx, "the ops one by one");
    assert_gpu_bits_equal (&a.ff, &b.ff, wff, "the ops one by one");
    assert_gpu_bits_equal (&a.y, &b.y, wy, "the ops one by one");
    tail_acts_free (&a);
    tail_acts_free (&b);
  }
  for (int i = 0; i < 4; i++)
    wpair_free (&w[i]);
}

void
test_layer_tail (void)
{
  static const int ms[] = {1, 2, 5, 8, 80}, few[] = {1, 3, 17, 128};
  for (guint i = 0; i < G_N_ELEMENTS (formats); i++) {
    /* the depformer's shapes: a layer into the next layer's in_proj, the last layer into the logits */
    check_layer_tail (formats[i], 1024, 2816, 3072, TRUE, ms, G_N_ELEMENTS (ms));
    check_layer_tail (formats[i], 1024, 2816, 2048, FALSE, few, G_N_ELEMENTS (few));
    /* the golden tiny model's: K tails (32 and 88 columns), one stage */
    check_layer_tail (formats[i], 32, 88, 96, TRUE, few, G_N_ELEMENTS (few));
  }
}
