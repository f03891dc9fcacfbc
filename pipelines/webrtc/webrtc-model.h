/* personaplex-webrtc: the shared model. Every session's personaplexduplex names the same
 * model-instance-id, so the process loads the weights once; a keeper element holds them between
 * sessions and makes a bad model directory or prompt fail at startup instead of at the first call. */
#ifndef PPX_WEBRTC_MODEL_H
#define PPX_WEBRTC_MODEL_H

#include <gst/gst.h>

#include "webrtc-options.h"

G_BEGIN_DECLS

/* A new personaplexduplex with the options' model, prompts and model-instance-id; NULL with an error
 * when the element is not installed. */
GstElement *ppx_webrtc_duplex_new (const PpxWebrtcOptions *o, const char *name, GError **error);

typedef struct _PpxWebrtcModelKeeper PpxWebrtcModelKeeper;

/* Loads the model (and runs the prompts once, as every session will). Slow for a large model. */
PpxWebrtcModelKeeper *ppx_webrtc_model_keeper_new (const PpxWebrtcOptions *o, GError **error);
/* Backend and quantization the model was loaded with, e.g. "cpu / bf16". */
char *ppx_webrtc_model_keeper_describe (PpxWebrtcModelKeeper *k);

/* The engine every session shares: its slots (the keeper holds one), bytes of one session's state and
 * of the whole engine, and its KV cache format ("bf16"; g_free). */
typedef struct {
  guint max_sessions;
  guint64 session_bytes, engine_bytes;
  char *kv_cache_format;
} PpxWebrtcEngineInfo;
void ppx_webrtc_model_keeper_engine (PpxWebrtcModelKeeper *k, PpxWebrtcEngineInfo *info);
void ppx_webrtc_model_keeper_free (PpxWebrtcModelKeeper *k);

G_END_DECLS
#endif
