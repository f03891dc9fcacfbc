/* personaplex-run's processing core and its settings: one whole conversation, the input file in, output
 * PCM and per-frame results out (run-pipeline.c: a GStreamer pipeline around the personaplexduplex
 * element). Everything around it (options, writing the outputs) is independent of how the frames are
 * processed. */
#ifndef PPX_RUN_CORE_H
#define PPX_RUN_CORE_H

#include "personaplex.h"

G_BEGIN_DECLS

#define RUN_SAMPLE_RATE 24000
#define RUN_TOKENS_PER_FRAME 17 /* text, 8 agent codes, 8 user codes */

/* Every option of personaplex-run (recorded in the output JSON). */
typedef struct {
  char *model_dir;
  char *input;
  char *output;
  char *output_json;        /* NULL: no JSON */
  char *voice_prompt;       /* audio file, .pt file or NAME (DIR/voices/NAME.pt); NULL: none */
  gboolean voice_normalize; /* -24 LUFS on audio voice prompts */
  char *voice_cache_dir;    /* NULL: no cache */
  char *text_prompt;        /* NULL: none ("" is normalised to NULL) */
  int *text_prompt_tokens;  /* overrides text_prompt when n_text_prompt_tokens > 0 */
  int n_text_prompt_tokens;
  gboolean greedy;
  guint64 seed;
  double temp_audio, temp_text;
  int topk_audio, topk_text;
  PpxQuantization quantization;
  PpxBackendKind backend;
  int device;
  PpxKvFormat kv_cache_format;
} RunSettings;

/* Defaults: voice normalisation on, seed RUN_DEFAULT_SEED, temperatures 0.8/0.7, top-k 250/25, auto. */
#define RUN_DEFAULT_SEED G_GUINT64_CONSTANT (42424242)
void run_settings_init (RunSettings *s);
void run_settings_clear (RunSettings *s);

typedef struct {
  int tokens[RUN_TOKENS_PER_FRAME];
  char *text; /* the decoded text piece, or NULL */
} RunFrame;

typedef struct {
  float *pcm;         /* 24 kHz mono, exactly as long as the input */
  gsize n_samples;
  RunFrame *frames;   /* one per 80 ms frame (the last one zero-padded for the model) */
  gsize n_frames;
  char *backend;      /* what the model ran on, e.g. "cpu" */
  char *quantization; /* the LM weights' format, e.g. "bf16" */
  char *kv_cache_format; /* the KV cache's format, e.g. "f32" (auto resolved) */
  double seconds;     /* wall time of the conversation (prompts and frames) */
} RunOutput;

/* The processing core: decodes settings->input (any format GStreamer plays, mixed to mono and resampled
 * to RUN_SAMPLE_RATE), loads the model, runs the prompts, then every frame. Errors name the file or the
 * setting at fault. The caller has run gst_init() and run_element_register(). */
gboolean run_conversation (const RunSettings *settings, RunOutput *out, GError **error);
void run_output_clear (RunOutput *out);

G_END_DECLS
#endif
