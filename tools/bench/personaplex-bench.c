/* personaplex-bench: speed and memory per component and per 80 ms frame.
 *
 *   personaplex-bench (--model-dir DIR | --random-weights tiny|mid|full)
 *                     [--component all|mimi|lm|session] [--quantization auto|bf16|int8|int4]
 *                     [--backend auto|cpu|cuda] [--device N] [--batch N] [--sequential] [--frames N] [--warmup N]
 *                     [--kv-cache-format auto|f32|bf16|fp8] [--context N] [--sweep LIST [--sweep-kv LIST]]
 *                     [--threads N] [--seed N] [--cuda-graphs on|off|both] [--json]
 *   personaplex-bench ... --measure-load [--load-repeats N] [--prequantized-dir DIR ...]
 *   personaplex-bench ... --join [--joins N] [--join-voice-seconds S] [--join-text-tokens N] [--prompt-chunk N]
 *                     [--join-prefill-only]
 *
 * Prints the machine and build, the load times, per component the mean/p50/p95/p99/max time of one frame
 * tick (all --batch sessions stepped once: as one batch, the engine's tick, or with --sequential one
 * after another), the time per session and the real-time factor, and per phase the weight bytes, the
 * state bytes per session and the resident memory (docs/performance.md).
 * --context N puts every session's LM at position N before the warm-up (full context from 3000 on, the
 * figures of a long conversation; bench-run.h says how).
 * --random-weights makes the checkpoints in memory (memfd), only those the components need; with
 * --quantization int8|int4 the LM is made pre-quantized, so a full-size LM fits (int4 about 5 GB).
 * --measure-load times LM loads instead: bf16 as stored, quantized at load, and pre-quantized.
 * --cuda-graphs both measures the batched session phase with the engine's CUDA graphs (session-step) and
 * without them (session-step-no-graphs); the notes say how many ticks replayed a graph of how many ops.
 * --join measures the join time of a call while --batch others tick in real time (bench-join.h): its system
 * prompts step by step, then as chunked prefill, and the running calls' tick responses meanwhile. */
#include "bench-measure.h"
#include "engine-internal.h"
#include "random-model.h"
#include "bench-report.h"
#include "bench-run.h"
#include "bench-sweep.h"
#include "bench-join.h"
#include "quant-load.h"
#include "safetensors.h"

#include <stdio.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define PROG "personaplex-bench"
#define LM_FILE "model.safetensors"

typedef struct {
  char *model_dir, *random_size, *component, *quantization, *backend, *kv_cache_format, *sweep, *sweep_kv,
    *cuda_graphs;
  char **prequantized_dirs;
  int batch, frames, warmup, threads, device, load_repeats;
  gint64 seed, context;
  gboolean json, measure_load, sequential;
  int component_id, quant_id, backend_id, kv_id, graphs_id; /* the parsed names */
  int sweep_batches[64], n_sweep;                            /* --sweep, parsed */
  gboolean join, join_prefill_only;                          /* --join */
  int joins, join_text_tokens, prompt_chunk, lm_context;
  double join_voice_seconds;
  PpxKvFormat sweep_kvs[8];                                  /* --sweep-kv, parsed (resolved) */
  int n_sweep_kv;
} Options;

/* The names of --component, --cuda-graphs and --random-weights, by value; the quantization, backend and KV
 * format names are the library's (ppx-types.h). */
enum { COMP_ALL, COMP_MIMI, COMP_LM, COMP_SESSION };
static const char *const component_names[] = {[COMP_ALL] = "all", [COMP_MIMI] = "mimi", [COMP_LM] = "lm",
                                              [COMP_SESSION] = "session", NULL};
static const char *const graphs_names[] = {[BENCH_GRAPHS_ON] = "on", [BENCH_GRAPHS_OFF] = "off",
                                           [BENCH_GRAPHS_BOTH] = "both", NULL};
static const char *const size_names[] = {"tiny", "mid", "full", NULL};

/* *out = the index of value in names (value NULL: 0, the default). */
static gboolean
pick (const char *const *names, const char *option, const char *value, int *out, GError **error)
{
  for (int i = 0; names[i]; i++) {
    if (!value || g_str_equal (names[i], value)) {
      *out = i;
      return TRUE;
    }
  }
  g_autofree char *list = g_strjoinv (", ", (char **) names);
  g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "--%s: unknown value '%s' (expected %s)", option, value, list);
  return FALSE;
}

/* --sweep-kv "bf16,fp8" (default: --kv-cache-format) into o->sweep_kvs, resolved as the engine does. */
static gboolean
parse_sweep_kv (Options *o, GError **error)
{
  g_auto (GStrv) items = g_strsplit (o->sweep_kv ? o->sweep_kv : ppx_kv_format_name ((PpxKvFormat) o->kv_id), ",", -1);
  o->n_sweep_kv = 0;
  for (int i = 0; items[i]; i++) {
    int id;
    if ((guint) o->n_sweep_kv == G_N_ELEMENTS (o->sweep_kvs)) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "--sweep-kv: at most %u formats",
                   (guint) G_N_ELEMENTS (o->sweep_kvs));
      return FALSE;
    }
    if (!pick (ppx_kv_format_names (), "sweep-kv", g_strstrip (items[i]), &id, error))
      return FALSE;
    o->sweep_kvs[o->n_sweep_kv++] = ppx_kv_format_resolve ((PpxKvFormat) id);
  }
  if (o->n_sweep_kv == 0) {
    g_set_error_literal (error, PPX_ERROR, PPX_ERROR_INVALID, "--sweep-kv: empty list");
    return FALSE;
  }
  return TRUE;
}

static gboolean
parse_options (int argc, char **argv, Options *o, GError **error)
{
  GOptionEntry entries[] = {
    {"model-dir", 'm', 0, G_OPTION_ARG_FILENAME, &o->model_dir, "Model directory (published layout)", "DIR"},
    {"random-weights", 'r', 0, G_OPTION_ARG_STRING, &o->random_size,
     "Random weights made in memory: tiny, mid or full (PersonaPlex-7B)", "SIZE"},
    {"component", 'c', 0, G_OPTION_ARG_STRING, &o->component, "all (default), mimi, lm or session", "NAME"},
    {"quantization", 'q', 0, G_OPTION_ARG_STRING, &o->quantization, "auto (default), bf16, int8 or int4", "Q"},
    {"backend", 'b', 0, G_OPTION_ARG_STRING, &o->backend, "auto (default), cpu or cuda", "NAME"},
    {"batch", 'B', 0, G_OPTION_ARG_INT, &o->batch, "Independent sessions stepped per frame tick (default 1)", "N"},
    {"sequential", 0, 0, G_OPTION_ARG_NONE, &o->sequential,
     "Step the sessions one after another instead of as one batch (the cost without the engine)", NULL},
    {"frames", 'n', 0, G_OPTION_ARG_INT, &o->frames, "Measured frames (default 20)", "N"},
    {"warmup", 'w', 0, G_OPTION_ARG_INT, &o->warmup, "Warm-up frames before measuring (default 2)", "N"},
    {"kv-cache-format", 0, 0, G_OPTION_ARG_STRING, &o->kv_cache_format,
     "KV caches of the LM and session phases: auto (the library's default), f32, bf16 or fp8", "F"},
    {"sweep", 0, 0, G_OPTION_ARG_STRING, &o->sweep,
     "Batched engine ticks for each of these batch sizes (e.g. 1,8,32,64) on one model load; a table", "LIST"},
    {"sweep-kv", 0, 0, G_OPTION_ARG_STRING, &o->sweep_kv,
     "With --sweep: the KV formats to sweep (e.g. bf16,fp8; default: --kv-cache-format)", "LIST"},
    {"context", 0, 0, G_OPTION_ARG_INT64, &o->context,
     "Put every session's LM at position N before the warm-up (3000: a full context; default 0)", "N"},
    {"threads", 't', 0, G_OPTION_ARG_INT, &o->threads, "CPU threads (default 0 = all cores)", "N"},
    {"device", 'd', 0, G_OPTION_ARG_INT, &o->device, "GPU index for the CUDA backend (default 0)", "N"},
    {"seed", 's', 0, G_OPTION_ARG_INT64, &o->seed, "Seed of the random weights and of sampling (default 0)", "N"},
    {"json", 'j', 0, G_OPTION_ARG_NONE, &o->json, "Machine-readable output (JSON on stdout)", NULL},
    {"cuda-graphs", 0, 0, G_OPTION_ARG_STRING, &o->cuda_graphs,
     "Batched ticks replayed as CUDA graphs: on (default), off, or both (measured one after the other)", "MODE"},
    {"measure-load", 0, 0, G_OPTION_ARG_NONE, &o->measure_load,
     "Time LM loads (bf16, quantized at load, pre-quantized) instead of frames", NULL},
    {"load-repeats", 0, 0, G_OPTION_ARG_INT, &o->load_repeats, "Loads per variant with --measure-load (default 3)", "N"},
    {"prequantized-dir", 0, 0, G_OPTION_ARG_FILENAME_ARRAY, &o->prequantized_dirs,
     "With --model-dir --measure-load: a personaplex-quantize output directory (repeatable)", "DIR"},
    {"lm-context", 0, 0, G_OPTION_ARG_INT, &o->lm_context,
     "With --random-weights: the LM's context (KV ring) instead of the size's (tiny: 20; mid and full: 3000)", "N"},
    {"join", 0, 0, G_OPTION_ARG_NONE, &o->join,
     "Join time: a call joins (voice + text prompt) while --batch others tick in real time, step by step then prefill",
     NULL},
    {"joins", 0, 0, G_OPTION_ARG_INT, &o->joins, "With --join: measured joins per mode (default 5)", "N"},
    {"join-voice-seconds", 0, 0, G_OPTION_ARG_DOUBLE, &o->join_voice_seconds,
     "With --join: the joining call's voice prompt in seconds (default 10)", "S"},
    {"join-text-tokens", 0, 0, G_OPTION_ARG_INT, &o->join_text_tokens,
     "With --join: the joining call's text prompt in tokens (default 100)", "N"},
    {"prompt-chunk", 0, 0, G_OPTION_ARG_INT, &o->prompt_chunk,
     "With --join: the engine's largest prompt chunk in frames (default: the library's)", "N"},
    {"join-prefill-only", 0, 0, G_OPTION_ARG_NONE, &o->join_prefill_only,
     "With --join: skip the step-by-step joins", NULL},
    {NULL},
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- speed and memory per component and per 80 ms frame");
  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, error))
    return FALSE;
  const char *problem = NULL;
  if (argc > 1)
    problem = "unexpected argument";
  else if (!o->model_dir == !o->random_size)
    problem = "give exactly one of --model-dir and --random-weights";
  else if (o->batch < (o->join ? 0 : 1) || o->batch > 4096)
    problem = "--batch must be in [1, 4096] (with --join [0, 4096]: the calls running while one joins)";
  else if (o->frames < 1 || o->frames > 1000000)
    problem = "--frames must be in [1, 1000000]";
  else if (o->warmup < 0 || o->warmup > 1000000)
    problem = "--warmup must be in [0, 1000000]";
  else if (o->context < 0 || o->context > G_GINT64_CONSTANT (1000000000))
    problem = "--context must be in [0, 1000000000]";
  else if (o->threads < 0 || o->threads > 4096)
    problem = "--threads must be in [0, 4096]";
  else if (o->device < 0)
    problem = "--device must be >= 0";
  else if (o->load_repeats < 1 || o->load_repeats > 1000)
    problem = "--load-repeats must be in [1, 1000]";
  else if (o->sweep_kv && !o->sweep)
    problem = "--sweep-kv needs --sweep";
  else if (o->sweep && (o->measure_load || o->sequential))
    problem = "--sweep measures the batched engine: not with --measure-load or --sequential";
  else if (o->prequantized_dirs && !(o->measure_load && o->model_dir))
    problem = "--prequantized-dir needs --model-dir and --measure-load";
  else if (o->lm_context && (!o->random_size || o->lm_context < 2 || o->lm_context > 100000))
    problem = "--lm-context needs --random-weights and must be in [2, 100000]";
  else if (o->join && (o->sweep || o->measure_load || o->sequential))
    problem = "--join measures the batched engine: not with --sweep, --measure-load or --sequential";
  else if (o->joins < 1 || o->joins > 1000)
    problem = "--joins must be in [1, 1000]";
  else if (!(o->join_voice_seconds >= 0 && o->join_voice_seconds <= 600))
    problem = "--join-voice-seconds must be in [0, 600]";
  else if (o->join_text_tokens < 0 || o->join_text_tokens > 100000)
    problem = "--join-text-tokens must be in [0, 100000]";
  else if (o->prompt_chunk < 0 || o->prompt_chunk > 100000)
    problem = "--prompt-chunk must be in [0, 100000]";
  if (problem) {
    g_set_error_literal (error, PPX_ERROR, PPX_ERROR_INVALID, problem);
    return FALSE;
  }
  int size_id;
  return pick (component_names, "component", o->component, &o->component_id, error) &&
         pick (ppx_quantization_names (), "quantization", o->quantization, &o->quant_id, error) &&
         pick (ppx_backend_kind_names (), "backend", o->backend, &o->backend_id, error) &&
         pick (ppx_kv_format_names (), "kv-cache-format", o->kv_cache_format, &o->kv_id, error) &&
         pick (graphs_names, "cuda-graphs", o->cuda_graphs, &o->graphs_id, error) &&
         (!o->random_size || pick (size_names, "random-weights", o->random_size, &size_id, error)) &&
         (!o->sweep || bench_parse_batches (o->sweep, o->sweep_batches, G_N_ELEMENTS (o->sweep_batches), &o->n_sweep,
                                            error)) &&
         (!o->sweep || parse_sweep_kv (o, error));
}

static char *
config_summary (const PpxConfig *c)
{
  const PpxLmConfig *l = &c->lm;
  const PpxMimiConfig *m = &c->mimi;
  return g_strdup_printf ("LM dim %d, %d layers, %d heads, FFN %d, context %d, text vocab %d; depformer dim %d, "
                          "%d layers, %d steps; Mimi SEANet %d filters, transformer %d x %d layers",
                          l->dim, l->num_layers, l->num_heads, l->ffn_hidden, l->context, l->text_card,
                          l->depformer_dim, l->depformer_num_layers, l->dep_q, m->n_filters, m->t_d_model,
                          m->t_num_layers);
}

/* ---- random weights in memory ---- */

typedef struct {
  MemFile *config, *mimi;
  MemFile *lm[3]; /* bf16, int8, int4 */
} RandomFiles;

static int
format_slot (PpxQuantization q)
{
  return q == PPX_QUANT_INT8 ? 1 : q == PPX_QUANT_INT4 ? 2 : 0;
}

static void
random_files_clear (RandomFiles *f)
{
  mem_file_free (f->config);
  mem_file_free (f->mimi);
  for (int i = 0; i < 3; i++)
    mem_file_free (f->lm[i]);
}

static gboolean
check_memory (guint64 files, guint64 state, const char *what, GError **error)
{
  guint64 avail = bench_mem_available_bytes ();
  if (avail == 0 || files + state + ((guint64) 1 << 30) <= avail)
    return TRUE;
  g_set_error (error, PPX_ERROR, PPX_ERROR_NOMEM,
               "%s needs %.1f GB of memory for its checkpoints and %.1f GB for the sessions' KV caches, only %.1f GB "
               "are available (leaving 1 GiB): use --quantization int8|int4 (the LM is then made pre-quantized), "
               "a smaller --batch, or --component mimi",
               what, files / 1e9, state / 1e9, avail / 1e9);
  return FALSE;
}

static gboolean
make_random (const Options *o, const PpxConfig *cfg, gboolean need_lm, gboolean need_mimi, const gboolean lm_formats[3],
             RandomFiles *f, BenchReport *r, GError **error)
{
  static const PpxQuantization formats[3] = {PPX_QUANT_BF16, PPX_QUANT_INT8, PPX_QUANT_INT4};
  guint64 need = need_mimi ? random_model_mimi_bytes (&cfg->mimi) : 0;
  for (int i = 0; need_lm && i < 3; i++)
    if (lm_formats[i])
      need += random_model_lm_bytes (&cfg->lm, formats[i]);
  /* The sessions' KV caches live in host memory only on the CPU backend; on a GPU they are the device's to
   * hold (the engine says so when they do not fit), and counting them here refused batches the GPU holds. */
  const gboolean host_state = g_strcmp0 (r->backend, "cpu") == 0;
  guint64 state = need_lm && !o->measure_load && host_state
                      ? ppx_lm_batch_bytes (&cfg->lm, o->batch, o->batch, ppx_kv_storage ((PpxKvFormat) o->kv_id))
                      : 0;
  g_autofree char *what = g_strdup_printf ("the random %s model", o->random_size);
  if (!check_memory (need, state, what, error))
    return FALSE;
  double t0 = bench_now_ms ();
  if (!(f->config = mem_file_new ("config.json", error)) || !random_model_write_config (cfg, f->config->path, error))
    return FALSE;
  if (need_mimi) {
    if (!(f->mimi = mem_file_new ("tokenizer-random.safetensors", error)) ||
        !random_model_write_mimi (&cfg->mimi, (guint64) o->seed, f->mimi->path, NULL, error))
      return FALSE;
    r->mimi_file_bytes = random_model_mimi_bytes (&cfg->mimi);
  }
  for (int i = 0; need_lm && i < 3; i++) {
    if (!lm_formats[i])
      continue;
    if (!(f->lm[i] = mem_file_new ("model.safetensors", error)) ||
        !random_model_write_lm (&cfg->lm, formats[i], (guint64) o->seed, f->lm[i]->path, NULL, error))
      return FALSE;
    if (!r->lm_file_format) {
      r->lm_file_bytes = random_model_lm_bytes (&cfg->lm, formats[i]);
      r->lm_file_format = g_strdup (ppx_quantization_name (formats[i]));
    }
  }
  r->generate_ms = bench_now_ms () - t0;
  return TRUE;
}

/* ---- --measure-load ---- */

static gboolean
measure_loads_random (const Options *o, const BenchSetup *s, const RandomFiles *f, BenchReport *r, GError **error)
{
  const char *bf16 = f->lm[0]->path;
  return bench_run_lm_load (s, "bf16 (as stored)", bf16, PPX_QUANT_BF16, o->load_repeats, r, error) &&
         bench_run_lm_load (s, "int8 quantized at load", bf16, PPX_QUANT_INT8, o->load_repeats, r, error) &&
         bench_run_lm_load (s, "int8 pre-quantized", f->lm[1]->path, PPX_QUANT_AUTO, o->load_repeats, r, error) &&
         bench_run_lm_load (s, "int4 quantized at load", bf16, PPX_QUANT_INT4, o->load_repeats, r, error) &&
         bench_run_lm_load (s, "int4 pre-quantized", f->lm[2]->path, PPX_QUANT_AUTO, o->load_repeats, r, error);
}

static gboolean
file_format (const char *path, PpxQuantization *q, GError **error)
{
  PpxSafetensors *st = ppx_st_open (path, error);
  if (!st)
    return FALSE;
  gboolean ok = ppx_quant_file_format (st, q, NULL, error);
  ppx_st_close (st);
  return ok;
}

static gboolean
measure_loads_dir (const Options *o, const BenchSetup *s, BenchReport *r, GError **error)
{
  PpxQuantization q;
  if (!file_format (s->lm_path, &q, error))
    return FALSE;
  if (q == PPX_QUANT_BF16) {
    if (!bench_run_lm_load (s, "bf16 (as stored)", s->lm_path, PPX_QUANT_BF16, o->load_repeats, r, error) ||
        !bench_run_lm_load (s, "int8 quantized at load", s->lm_path, PPX_QUANT_INT8, o->load_repeats, r, error) ||
        !bench_run_lm_load (s, "int4 quantized at load", s->lm_path, PPX_QUANT_INT4, o->load_repeats, r, error))
      return FALSE;
  } else {
    g_autofree char *name = g_strdup_printf ("%s pre-quantized", ppx_quantization_name (q));
    if (!bench_run_lm_load (s, name, s->lm_path, PPX_QUANT_AUTO, o->load_repeats, r, error))
      return FALSE;
  }
  for (char **d = o->prequantized_dirs; d && *d; d++) {
    g_autofree char *path = g_build_filename (*d, LM_FILE, NULL);
    if (!file_format (path, &q, error))
      return FALSE;
    g_autofree char *name = g_strdup_printf ("%s pre-quantized", ppx_quantization_name (q));
    if (!bench_run_lm_load (s, name, path, PPX_QUANT_AUTO, o->load_repeats, r, error))
      return FALSE;
  }
  return TRUE;
}

/* ---- main ---- */

static gboolean
run (const Options *o, BenchReport *r, GError **error)
{
  const int component = o->component_id, quant = o->quant_id, backend = o->backend_id;
  /* Fail before any generation or load when the backend does not exist. */
  PpxBackend *probe = bench_backend_new (backend, o->threads, o->device, error);
  if (!probe)
    return FALSE;
  r->backend = g_strdup (ppx_backend_name (probe));
  r->device = bench_device_name (probe);
  ppx_backend_free (probe);
#ifdef _OPENMP
  if (o->threads > 0)
    omp_set_num_threads (o->threads);
#endif

  BenchSetup s = {.backend = backend, .quantization = quant, .threads = o->threads, .device = o->device, .batch = o->batch,
                  .frames = o->frames, .warmup = o->warmup, .seed = (guint64) o->seed, .sequential = o->sequential,
                  .kv_format = ppx_kv_format_resolve ((PpxKvFormat) o->kv_id), .context = o->context,
                  .cuda_graphs = o->graphs_id};
  r->cpu = bench_cpu_model ();
  r->cores = bench_cpu_cores ();
  r->load_average = bench_load_average ();
  r->threads = o->threads > 0 ? o->threads : r->cores;
  r->quantization = ppx_quantization_name (quant);
  r->kv_cache_format = ppx_kv_format_name (s.kv_format);
  r->context = o->measure_load ? 0 : o->context;
  r->batch = o->batch;
  r->frames = o->measure_load ? 0 : o->frames;
  r->warmup = o->measure_load ? 0 : o->warmup;

  const gboolean need_mimi = !o->measure_load && component != COMP_LM;
  const gboolean need_lm = o->measure_load || component != COMP_MIMI;
  g_autofree char *lm_path = NULL, *mimi_path = NULL;
  RandomFiles files = {0};
  gboolean ok;
  if (o->model_dir) {
    ok = g_file_test (o->model_dir, G_FILE_TEST_IS_DIR);
    if (!ok)
      g_set_error (error, PPX_ERROR, PPX_ERROR_MISSING, "%s: model directory does not exist", o->model_dir);
    ok = ok && ppx_config_load_dir (&s.cfg, o->model_dir, error);
    s.model_dir = o->model_dir;
    lm_path = g_build_filename (o->model_dir, LM_FILE, NULL);
    mimi_path = ppx_model_dir_mimi_path (o->model_dir);
    r->model_source = g_strdup (o->model_dir);
  } else {
    ok = random_model_config (o->random_size, &s.cfg, error);
    if (ok && o->lm_context)
      s.cfg.lm.context = o->lm_context;
    gboolean formats[3] = {FALSE, FALSE, FALSE};
    if (o->measure_load)
      formats[0] = formats[1] = formats[2] = TRUE;
    else
      formats[format_slot (quant)] = TRUE;
    r->model_source = g_strdup_printf ("random %s (made in memory)", o->random_size);
    if (ok)
      g_printerr ("%s: making the random %s model in memory...\n", PROG, o->random_size);
    ok = ok && make_random (o, &s.cfg, need_lm, need_mimi, formats, &files, r, error);
    if (ok) {
      int slot = o->measure_load ? 0 : format_slot (quant);
      lm_path = files.lm[slot] ? g_strdup (files.lm[slot]->path) : NULL;
      mimi_path = files.mimi ? g_strdup (files.mimi->path) : NULL;
      s.config_path = files.config->path;
    }
  }
  if (ok) {
    s.lm_path = lm_path;
    s.mimi_path = mimi_path;
    r->config_summary = config_summary (&s.cfg);
    r->frame_ms = 1000.0 * s.cfg.mimi.frame_size / s.cfg.mimi.sample_rate;
  }
  if (ok && o->join) {
    const BenchJoin j = {.joins = o->joins, .voice_seconds = o->join_voice_seconds, .text_tokens = o->join_text_tokens,
                         .prompt_chunk = o->prompt_chunk, .compare = !o->join_prefill_only};
    ok = bench_run_join (&s, &j, stdout, error);
    random_files_clear (&files);
    return ok;
  }
  if (ok && o->sweep) {
    ok = bench_run_sweep (&s, o->sweep_batches, o->n_sweep, o->sweep_kvs, o->n_sweep_kv, r->device, stdout, error);
    random_files_clear (&files);
    return ok;
  }
  if (ok && o->measure_load) {
    g_printerr ("%s: measuring LM loads...\n", PROG);
    ok = o->model_dir ? measure_loads_dir (o, &s, r, error) : measure_loads_random (o, &s, &files, r, error);
  } else if (ok) {
    if (ok && (component == COMP_ALL || component == COMP_MIMI)) {
      g_printerr ("%s: measuring Mimi...\n", PROG);
      ok = bench_run_mimi (&s, r, error);
    }
    if (ok && (component == COMP_ALL || component == COMP_LM)) {
      g_printerr ("%s: measuring the LM...\n", PROG);
      ok = bench_run_lm (&s, r, error);
    }
    if (ok && (component == COMP_ALL || component == COMP_SESSION)) {
      g_printerr ("%s: measuring whole sessions...\n", PROG);
      ok = bench_run_session (&s, r, error);
    }
  }
  random_files_clear (&files);
  return ok;
}

int
main (int argc, char **argv)
{
  Options o = {.batch = 1, .frames = 20, .warmup = 2, .load_repeats = 3, .joins = 5, .join_voice_seconds = 10,
               .join_text_tokens = 100};
  g_autoptr (GError) error = NULL;
  int status = 2;
  if (parse_options (argc, argv, &o, &error)) {
    g_autoptr (BenchReport) r = bench_report_new ();
    const gboolean ok = run (&o, r, &error);
    if (ok && o.json) {
      g_autofree char *json = bench_report_to_json (r);
      printf ("%s\n", json);
    } else if (ok) {
      bench_report_print_text (r, stdout);
    }
    status = ok ? 0 : 1;
  }
  if (error)
    g_printerr ("%s: %s\n", PROG, error->message);
  g_free (o.model_dir);
  g_free (o.random_size);
  g_free (o.component);
  g_free (o.quantization);
  g_free (o.backend);
  g_free (o.kv_cache_format);
  g_free (o.sweep);
  g_free (o.sweep_kv);
  g_free (o.cuda_graphs);
  g_strfreev (o.prequantized_dirs);
  return status;
}
