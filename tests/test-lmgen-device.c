/* LMGen on the device (lmgen-state.h, ppx_op_lmgen_prepare/finish) against the host LMGen (lmgen.c) on the
 * CPU backend: many sessions with different histories (prompt calls with every mix of user/agent/text/
 * embedding inputs, offsets inside and past the output lag, the full-depformer flag), packed into a device
 * state tensor under shuffled slots, then stepped through conversation calls on both sides with the same
 * user codes and sampled tokens: the model inputs (ids, forced, position, frame, depformer steps), the
 * output frame and the whole state must be identical after every call, and pack/unpack must round-trip.
 * Configurations: the built-in PersonaPlex-7B one, dep_q 8, and random delays; also a session driven
 * through the reference's prompt sequence and the golden user codes when the golden data is present.
 * Also ppx_op_positions. */
#include "backend.h"
#include "config.h"
#include "lmgen.h"
#include "safetensors.h"
#include "test-util.h"

#define W PPX_MAX_STREAMS
#define OUTW (W + PPX_LMGEN_STATE)

static PpxBackend *be;

/* One host call of any kind (a prompt frame): random inputs, random sampled tokens. */
static void
host_call (PpxLmGen *g, GRand *r, gboolean conversation)
{
  const PpxLmConfig *c = &g->cfg;
  const int nq = c->n_q / 2;
  int user[8], agent[8];
  float emb[4] = {0};
  for (int q = 0; q < nq; q++) {
    user[q] = g_rand_int_range (r, 0, c->card);
    agent[q] = g_rand_int_range (r, 0, c->card);
  }
  const gboolean give_user = conversation || g_rand_boolean (r), give_agent = !conversation && g_rand_boolean (r);
  const int text = !conversation && g_rand_boolean (r) ? g_rand_int_range (r, 0, c->text_card) : -1;
  const float *embedding = !conversation && g_rand_int_range (r, 0, 5) == 0 ? emb : NULL;
  const PpxSampling smp = {0};
  PpxLmRow row;
  if (!ppx_lmgen_prepare (g, give_user ? user : NULL, give_agent ? agent : NULL, text, embedding, &smp, &row))
    return;
  for (int k = 0; k < W; k++)
    row.out[k] = g_rand_int_range (r, 0, k == 0 ? c->text_card : c->card);
  int out[W];
  ppx_lmgen_finish (g, &row, out);
}

static void
assert_same_gen (const PpxLmGen *a, const PpxLmGen *b)
{
  g_assert_cmpint (a->offset, ==, b->offset);
  g_assert_cmpint (a->full_depformer, ==, b->full_depformer);
  for (int k = 0; k < W; k++) {
    for (int c = 0; c < PPX_LMGEN_COLS; c++) {
      g_assert_cmpint (a->cache[k][c], ==, b->cache[k][c]);
      g_assert_cmpint (!!a->provided[k][c], ==, !!b->provided[k][c]);
    }
  }
}

/* n sessions with random histories, `calls` conversation calls each, on shuffled slots of n + 3. */
static void
run_random (const PpxLmConfig *c, int n, int calls, guint32 seed)
{
  g_autoptr (GError) err = NULL;
  GRand *r = g_rand_new_with_seed (seed);
  const int n_slots = n + 3, nq = c->n_q / 2;
  PpxLmgenDims d;
  ppx_lmgen_dims (c, &d);
  PpxLmGen *gens = g_new0 (PpxLmGen, n);
  int32_t *slots = g_new (int32_t, n_slots);
  for (int i = 0; i < n_slots; i++)
    slots[i] = i;
  for (int i = n_slots - 1; i > 0; i--) { /* rows use n of the slots, out of order */
    int j = g_rand_int_range (r, 0, i + 1), t = slots[i];
    slots[i] = slots[j];
    slots[j] = t;
  }
  PpxTensor *state = ppx_tensor_new (be, PPX_TENSOR_I32, (gsize) n_slots * PPX_LMGEN_STATE, &err);
  PpxTensor *slot = ppx_tensor_new (be, PPX_TENSOR_I32, n, &err);
  PpxTensor *codes = ppx_tensor_new (be, PPX_TENSOR_I32, (gsize) n * 11, &err);
  PpxTensor *ids = ppx_tensor_new (be, PPX_TENSOR_I32, (gsize) n * W, &err);
  PpxTensor *forced = ppx_tensor_new (be, PPX_TENSOR_I32, (gsize) n * W, &err);
  PpxTensor *pos = ppx_tensor_new (be, PPX_TENSOR_I32, n, &err);
  PpxTensor *params = ppx_tensor_new (be, PPX_TENSOR_I32, (gsize) n * PPX_SAMPLE_PARAMS, &err);
  PpxTensor *sampled = ppx_tensor_new (be, PPX_TENSOR_I32, (gsize) n * W, &err);
  PpxTensor *out = ppx_tensor_new (be, PPX_TENSOR_I32, (gsize) n * OUTW, &err);
  g_assert_no_error (err);
  ppx_tensor_upload (slot, 0, slots, n);
  int32_t st[PPX_LMGEN_STATE];
  int in_lag = 0; /* sessions that start inside the output lag */
  for (int i = 0; i < n; i++) {
    ppx_lmgen_init (&gens[i], c);
    gens[i].full_depformer = g_rand_int_range (r, 0, 4) == 0;
    const int history = g_rand_int_range (r, 1, 9); /* offsets 1..8: inside and past the output lag */
    while (gens[i].offset < history)
      host_call (&gens[i], r, FALSE);
    in_lag += gens[i].offset <= c->max_delay;
    ppx_lmgen_pack (&gens[i], st);
    PpxLmGen back;
    ppx_lmgen_init (&back, c);
    ppx_lmgen_unpack (&back, st);
    assert_same_gen (&back, &gens[i]);
    ppx_tensor_upload (state, (gsize) slots[i] * PPX_LMGEN_STATE, st, PPX_LMGEN_STATE);
  }
  g_autofree int32_t *h_codes = g_new (int32_t, (gsize) n * 11), *h_sampled = g_new (int32_t, (gsize) n * W);
  g_autofree int32_t *h_ids = g_new (int32_t, (gsize) n * W), *h_forced = g_new (int32_t, (gsize) n * W);
  g_autofree int32_t *h_pos = g_new (int32_t, n), *h_params = g_new0 (int32_t, (gsize) n * PPX_SAMPLE_PARAMS);
  g_autofree int32_t *h_out = g_new (int32_t, (gsize) n * OUTW), *h_state = g_new (int32_t, (gsize) n_slots * PPX_LMGEN_STATE);
  int frames = 0, no_frames = 0;
  for (int call = 0; call < calls; call++) {
    for (gsize j = 0; j < (gsize) n * 11; j++)
      h_codes[j] = g_rand_int_range (r, 0, c->card);
    for (int m = 0; m < n; m++)
      for (int k = 0; k < W; k++)
        h_sampled[m * W + k] = g_rand_int_range (r, 0, k == 0 ? c->text_card : c->card);
    for (gsize j = 0; j < (gsize) n * PPX_SAMPLE_PARAMS; j++)
      h_params[j] = (int32_t) g_rand_int (r); /* prepare writes the frame words only */
    ppx_tensor_upload (codes, 0, h_codes, (gsize) n * 11);
    ppx_tensor_upload (sampled, 0, h_sampled, (gsize) n * W);
    ppx_tensor_upload (params, 0, h_params, (gsize) n * PPX_SAMPLE_PARAMS);
    /* user codes at offset 2 of rows of 11 (as codes inside a wider tensor) */
    ppx_op_lmgen_prepare (be, &d, state, slot, codes, 2, 11, ids, forced, pos, params, n);
    g_autofree int32_t *p_after = g_new (int32_t, (gsize) n * PPX_SAMPLE_PARAMS);
    ppx_tensor_download (ids, 0, h_ids, (gsize) n * W);
    ppx_tensor_download (forced, 0, h_forced, (gsize) n * W);
    ppx_tensor_download (pos, 0, h_pos, n);
    ppx_tensor_download (params, 0, p_after, (gsize) n * PPX_SAMPLE_PARAMS);
    ppx_tensor_download (state, 0, h_state, (gsize) n_slots * PPX_LMGEN_STATE);
    PpxLmRow *rows = g_new (PpxLmRow, n);
    for (int m = 0; m < n; m++) {
      int user[8];
      for (int q = 0; q < nq; q++)
        user[q] = h_codes[m * 11 + 2 + q];
      int peek_steps = -5;
      gboolean peek_sample = -5;
      g_assert_true (ppx_lmgen_peek_conversation (&gens[m], &peek_steps, &peek_sample));
      const PpxSampling smp = {0};
      g_assert_true (ppx_lmgen_prepare (&gens[m], user, NULL, -1, NULL, &smp, &rows[m]));
      const PpxLmRow *row = &rows[m];
      g_assert_cmpint (peek_steps, ==, row->n_steps);
      g_assert_cmpint (peek_sample, ==, row->sample);
      for (int k = 0; k < W; k++) {
        g_assert_cmpint (h_ids[m * W + k], ==, k < c->n_streams ? row->ids[k] : -1);
        g_assert_cmpint (h_forced[m * W + k], ==, k <= c->dep_q ? row->forced[k] : -1);
      }
      g_assert_cmpint (h_pos[m], ==, row->pos);
      const guint64 frame = (guint32) p_after[m * PPX_SAMPLE_PARAMS + PPX_SAMPLE_FRAME_LO] |
                            (guint64) (guint32) p_after[m * PPX_SAMPLE_PARAMS + PPX_SAMPLE_FRAME_HI] << 32;
      g_assert_cmpuint (frame, ==, row->frame);
      for (int j = 0; j < PPX_SAMPLE_PARAMS; j++)
        if (j != PPX_SAMPLE_FRAME_LO && j != PPX_SAMPLE_FRAME_HI)
          g_assert_cmpint (p_after[m * PPX_SAMPLE_PARAMS + j], ==, h_params[m * PPX_SAMPLE_PARAMS + j]);
      const int32_t *dst = h_state + (gsize) slots[m] * PPX_LMGEN_STATE;
      g_assert_cmpint (dst[PPX_LMGEN_S_STEPS], ==, row->sample ? row->n_steps : -1);
      ppx_lmgen_pack (&gens[m], st); /* the cache after prepare: the user's codes written */
      for (int j = 0; j < PPX_LMGEN_STATE; j++)
        if (j != PPX_LMGEN_S_STEPS)
          g_assert_cmpint (dst[j], ==, st[j]);
    }
    ppx_op_lmgen_finish (be, &d, state, slot, sampled, out, OUTW, n);
    ppx_tensor_download (out, 0, h_out, (gsize) n * OUTW);
    ppx_tensor_download (state, 0, h_state, (gsize) n_slots * PPX_LMGEN_STATE);
    for (int m = 0; m < n; m++) {
      PpxLmRow *row = &rows[m];
      for (int k = 0; k < W; k++)
        row->out[k] = h_sampled[m * W + k];
      int want[W];
      const gboolean framed = ppx_lmgen_finish (&gens[m], row, want);
      frames += framed;
      no_frames += !framed;
      const int32_t *o = h_out + (gsize) m * OUTW;
      for (int k = 0; k < W; k++)
        g_assert_cmpint (o[k], ==, framed && k < c->n_streams ? want[k] : -1);
      ppx_lmgen_pack (&gens[m], st);
      const int32_t *dst = h_state + (gsize) slots[m] * PPX_LMGEN_STATE;
      for (int j = 0; j < PPX_LMGEN_STATE; j++) {
        g_assert_cmpint (o[W + j], ==, dst[j]); /* the snapshot is the state */
        if (j != PPX_LMGEN_S_STEPS)
          g_assert_cmpint (dst[j], ==, st[j]);
      }
      PpxLmGen back = gens[m];
      ppx_lmgen_unpack (&back, o + W);
      assert_same_gen (&back, &gens[m]);
      g_assert_cmpint (back.last_dep_steps, ==, gens[m].last_dep_steps);
    }
    g_free (rows);
  }
  g_assert_cmpint (frames, >, 0);
  if (in_lag > 0)
    g_assert_cmpint (no_frames, >, 0);
  PpxTensor *ts[] = {state, slot, codes, ids, forced, pos, params, sampled, out};
  for (guint i = 0; i < G_N_ELEMENTS (ts); i++)
    ppx_tensor_free (ts[i]);
  g_free (gens);
  g_free (slots);
  g_rand_free (r);
}

static void
test_default_config (void)
{
  PpxConfig cfg;
  ppx_config_default (&cfg);
  g_assert_true (ppx_config_finish (&cfg, "default", NULL));
  for (int n = 1; n <= 9; n += 4)
    run_random (&cfg.lm, n, 40, 100 + n);
}

static void
test_dep_q_8 (void)
{
  PpxConfig cfg;
  ppx_config_default (&cfg);
  cfg.lm.dep_q = 8;
  g_assert_true (ppx_config_finish (&cfg, "dep_q 8", NULL));
  run_random (&cfg.lm, 7, 30, 7);
}

static void
test_random_delays (void)
{
  GRand *r = g_rand_new_with_seed (42);
  for (int trial = 0; trial < 12; trial++) {
    PpxConfig cfg;
    ppx_config_default (&cfg);
    for (int k = 0; k < 17; k++)
      cfg.lm.delays[k] = trial == 0 ? 0 : (int) g_rand_int_range (r, 0, 2); /* trial 0: no delays at all */
    cfg.lm.dep_q = g_rand_int_range (r, 8, 17);
    g_assert_true (ppx_config_finish (&cfg, "random", NULL));
    run_random (&cfg.lm, 1 + trial % 6, 25, 1000 + trial);
  }
  g_rand_free (r);
}

/* The reference's prompt sequence (silence/sine frames, text tokens) on the host, then the golden user
 * codes as the conversation on both sides. */
static void
test_golden_sequence (void)
{
  const char *dir = ppx_test_golden_dir ();
  if (!dir) {
    g_test_skip ("no golden data");
    return;
  }
  g_autoptr (GError) err = NULL;
  g_autofree char *jpath = g_build_filename (dir, "golden.json", NULL), *gpath = g_build_filename (dir, "golden.safetensors", NULL);
  g_autofree char *json = NULL;
  gsize len;
  g_assert_true (g_file_get_contents (jpath, &json, &len, &err));
  PpxConfig cfg;
  ppx_config_default (&cfg);
  g_assert_true (ppx_config_apply_json (&cfg, json, (gssize) len, "golden.json", &err));
  PpxSafetensors *st = ppx_st_open (gpath, &err);
  g_assert_no_error (err);
  const PpxStTensor *in = ppx_st_find (st, "lm_run_in_codes"), *outt = ppx_st_find (st, "lm_run_out_tokens");
  g_assert_true (in && outt);
  const int T = (int) in->shape[0];
  const int64_t *codes = (const int64_t *) in->data, *golden_out = (const int64_t *) outt->data;
  PpxLmgenDims d;
  ppx_lmgen_dims (&cfg.lm, &d);
  PpxLmGen g;
  ppx_lmgen_init (&g, &cfg.lm);
  static const int silence[8] = {948, 243, 1178, 546, 1736, 1030, 1978, 2008};
  static const int sine[8] = {430, 1268, 381, 1611, 1095, 1495, 56, 472};
  const PpxSampling smp = {0};
  for (int i = 0; i < 12 + 5; i++) {
    PpxLmRow row;
    if (!ppx_lmgen_prepare (&g, sine, silence, i >= 6 && i < 11 ? 100 + i : 3, NULL, &smp, &row))
      continue;
    for (int k = 0; k < W; k++)
      row.out[k] = (k * 37 + i * 11) % cfg.lm.card;
    int o[W];
    ppx_lmgen_finish (&g, &row, o);
  }
  PpxTensor *state = ppx_tensor_new (be, PPX_TENSOR_I32, PPX_LMGEN_STATE, &err);
  PpxTensor *slot = ppx_tensor_new (be, PPX_TENSOR_I32, 1, &err);
  PpxTensor *dcodes = ppx_tensor_new (be, PPX_TENSOR_I32, 8, &err);
  PpxTensor *ids = ppx_tensor_new (be, PPX_TENSOR_I32, W, &err), *forced = ppx_tensor_new (be, PPX_TENSOR_I32, W, &err);
  PpxTensor *pos = ppx_tensor_new (be, PPX_TENSOR_I32, 1, &err);
  PpxTensor *params = ppx_tensor_new (be, PPX_TENSOR_I32, PPX_SAMPLE_PARAMS, &err);
  PpxTensor *sampled = ppx_tensor_new (be, PPX_TENSOR_I32, W, &err), *out = ppx_tensor_new (be, PPX_TENSOR_I32, OUTW, &err);
  g_assert_no_error (err);
  int32_t stw[PPX_LMGEN_STATE];
  ppx_lmgen_pack (&g, stw);
  ppx_tensor_upload (state, 0, stw, PPX_LMGEN_STATE);
  for (int t = 0; t < T; t++) {
    int user[8];
    int32_t u32[8], s32[W], o32[OUTW];
    for (int q = 0; q < 8; q++)
      u32[q] = user[q] = (int) codes[t * 8 + q];
    ppx_tensor_upload (dcodes, 0, u32, 8);
    ppx_op_lmgen_prepare (be, &d, state, slot, dcodes, 0, 8, ids, forced, pos, params, 1);
    PpxLmRow row;
    g_assert_true (ppx_lmgen_prepare (&g, user, NULL, -1, NULL, &smp, &row));
    int32_t hid[W], hf[W];
    ppx_tensor_download (ids, 0, hid, W);
    ppx_tensor_download (forced, 0, hf, W);
    for (int k = 0; k < cfg.lm.n_streams; k++) {
      g_assert_cmpint (hid[k], ==, row.ids[k]);
      g_assert_cmpint (hf[k], ==, row.forced[k]);
    }
    for (int k = 0; k < W; k++) /* the reference's tokens as what the model sampled */
      s32[k] = row.out[k] = k < cfg.lm.n_streams ? (int) golden_out[(gsize) t * 17 + k] : 0;
    ppx_tensor_upload (sampled, 0, s32, W);
    ppx_op_lmgen_finish (be, &d, state, slot, sampled, out, OUTW, 1);
    int want[W];
    g_assert_true (ppx_lmgen_finish (&g, &row, want));
    ppx_tensor_download (out, 0, o32, OUTW);
    for (int k = 0; k < cfg.lm.n_streams; k++)
      g_assert_cmpint (o32[k], ==, want[k]);
    ppx_lmgen_pack (&g, stw);
    for (int j = 0; j < PPX_LMGEN_STATE; j++)
      if (j != PPX_LMGEN_S_STEPS)
        g_assert_cmpint (o32[W + j], ==, stw[j]);
  }
  PpxTensor *ts[] = {state, slot, dcodes, ids, forced, pos, params, sampled, out};
  for (guint i = 0; i < G_N_ELEMENTS (ts); i++)
    ppx_tensor_free (ts[i]);
  ppx_st_close (st);
}

static void
test_positions (void)
{
  g_autoptr (GError) err = NULL;
  PpxTensor *off = ppx_tensor_new (be, PPX_TENSOR_I32, 5, &err), *pos = ppx_tensor_new (be, PPX_TENSOR_I32, 12, &err);
  g_assert_no_error (err);
  const int32_t start[5] = {0, 7, 1000, 3, 99};
  ppx_tensor_upload (off, 0, start, 5);
  PpxTensor *rows = ppx_tensor_view (off, 1, 3); /* rows 1..3 only */
  for (int call = 0; call < 3; call++) {
    ppx_op_positions (be, rows, pos, 3, 4);
    int32_t p[12], o[5];
    ppx_tensor_download (pos, 0, p, 12);
    ppx_tensor_download (off, 0, o, 5);
    for (int m = 0; m < 3; m++)
      for (int t = 0; t < 4; t++)
        g_assert_cmpint (p[m * 4 + t], ==, start[1 + m] + 4 * call + t);
    g_assert_cmpint (o[0], ==, 0);
    g_assert_cmpint (o[4], ==, 99);
    for (int m = 0; m < 3; m++)
      g_assert_cmpint (o[1 + m], ==, start[1 + m] + 4 * (call + 1));
  }
  ppx_tensor_free (rows);
  ppx_tensor_free (off);
  ppx_tensor_free (pos);
}

static void
test_no_graphs_on_cpu (void)
{
  g_autoptr (GError) err = NULL;
  g_assert_false (ppx_backend_supports_graphs (be));
  g_assert_false (ppx_backend_graph_begin (be, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_UNSUPPORTED);
  g_clear_error (&err);
  g_assert_null (ppx_backend_graph_end (be, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_UNSUPPORTED);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  be = ppx_backend_cpu_new (1, NULL);
  g_test_add_func ("/lmgen-device/default-config", test_default_config);
  g_test_add_func ("/lmgen-device/dep-q-8", test_dep_q_8);
  g_test_add_func ("/lmgen-device/random-delays", test_random_delays);
  g_test_add_func ("/lmgen-device/golden-sequence", test_golden_sequence);
  g_test_add_func ("/lmgen-device/positions", test_positions);
  g_test_add_func ("/lmgen-device/no-graphs-on-cpu", test_no_graphs_on_cpu);
  int rc = g_test_run ();
  ppx_backend_free (be);
  return rc;
}
