/* The golden conversation with the temporal KV cache stored in bf16 and in fp8 (e4m3), stepped in
 * lockstep with the f32-cache run on the same weights: reports the first divergence from the golden
 * tokens and the text-logit error before it (the figures quoted in docs/quantization.md, "KV cache").
 * Every run must stay finite and end to end; the logit error before the first divergence is bounded. */
#include "golden-lockstep.h"

static GoldenModel G;

static void
check (PpxKvFormat kv, double bound)
{
  PpxModel *m = golden_model_load (&G, PPX_BACKEND_CPU);
  PpxSession *ref = golden_lockstep_session (&G, m, PPX_KV_F32), *s = golden_lockstep_session (&G, m, kv);
  GoldenLockstep r;
  golden_lockstep_run (&G, ppx_model_frame_size (m), ref, s, &r);
  g_autofree char *name = g_strdup_printf ("kv %s", ppx_kv_format_name (kv));
  golden_lockstep_print (name, &r);
  g_assert_cmpfloat (r.logit_before, <, bound);
  ppx_session_free (ref);
  ppx_session_free (s);
  ppx_model_unref (m);
}

static void
test_bf16 (void)
{
  check (PPX_KV_BF16, 0.003);
}

static void
test_fp8 (void)
{
  check (PPX_KV_FP8, 0.05);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  golden_model_setup (&G);
  g_test_add_func ("/kv/conversation/bf16", test_bf16);
  g_test_add_func ("/kv/conversation/fp8", test_fp8);
  int rc = g_test_run ();
  golden_model_teardown (&G);
  return rc;
}
