/* The golden conversation with quantized weights (quantized at load), stepped in lockstep with the
 * bf16 run: int8 must reproduce the golden tokens or the report names the first divergence and the
 * logit error there; int4 must run end to end. Prints the report quoted in docs/quantization.md. */
#include "golden-lockstep.h"

static GoldenModel G;

static PpxModel *
load (PpxQuantization q)
{
  PpxModelParams mp;
  ppx_model_params_init (&mp);
  mp.model_dir = G.dir;
  mp.quantization = q;
  g_autoptr (GError) err = NULL;
  PpxModel *m = ppx_model_load (&mp, &err);
  g_assert_no_error (err);
  return m;
}

static void
check (PpxQuantization q)
{
  PpxModel *ref_m = load (PPX_QUANT_BF16), *q_m = load (q);
  /* the golden reference computes in f32 */
  PpxSession *ref = golden_lockstep_session (&G, ref_m, PPX_KV_F32), *qs = golden_lockstep_session (&G, q_m, PPX_KV_F32);
  GoldenLockstep r;
  golden_lockstep_run (&G, ppx_model_frame_size (ref_m), ref, qs, &r);
  golden_lockstep_print (ppx_model_quantization_name (q_m), &r);
  g_assert_cmpfloat (r.logit_before, <, q == PPX_QUANT_INT8 ? 0.05 : 0.5);
  ppx_session_free (ref);
  ppx_session_free (qs);
  ppx_model_unref (ref_m);
  ppx_model_unref (q_m);
}

static void
test_int8 (void)
{
  check (PPX_QUANT_INT8);
}

static void
test_int4 (void)
{
  check (PPX_QUANT_INT4);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  golden_model_setup (&G);
  g_test_add_func ("/quant/conversation/int8", test_int8);
  g_test_add_func ("/quant/conversation/int4", test_int4);
  int rc = g_test_run ();
  golden_model_teardown (&G);
  return rc;
}
