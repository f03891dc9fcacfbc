/* personaplexduplex: process-wide pool of loaded models and their engines,
 * keyed by model-instance-id.
 *
 * Elements that name the same model-instance-id share one PpxModel (the
 * read-only weights), one PpxEngine (the slots of per-session state that
 * are stepped together) and the engine's ticker; each element still owns
 * its own PpxSession, a slot of that engine. The pool has its own lock
 * (never the object lock of an element), holds one reference per user and
 * frees the model, the engine and the ticker with its last user. */
#ifndef __GST_PP_MODEL_POOL_H__
#define __GST_PP_MODEL_POOL_H__

#include <glib.h>
#include "gstppticker.h"
#include "personaplex.h"

G_BEGIN_DECLS

typedef struct _GstPpModelHandle GstPpModelHandle;

/* Loads the model described by @params and makes its engine
 * (@engine_params), or, when @instance_id is a non-empty string that
 * another element already loaded, shares that model and engine.
 * Sharing requires the same model-dir, quantization, backend and device,
 * and the same max-sessions and kv-cache-format; a mismatch is an error
 * that names the id and both settings. Without an id the engine has one
 * session whatever @engine_params->max_sessions says.
 * While one element loads, others asking for the same id wait for it.
 * Returns NULL and sets @error on failure. */
GstPpModelHandle *gst_pp_model_pool_acquire (const char *instance_id,
    const PpxModelParams * params, const PpxEngineParams * engine_params,
    GError ** error);

/* Drops this user's reference; everything is freed with its last user. */
void gst_pp_model_pool_release (GstPpModelHandle * handle);

PpxModel *gst_pp_model_handle_get_model (const GstPpModelHandle * handle);
PpxEngine *gst_pp_model_handle_get_engine (const GstPpModelHandle * handle);
GstPpTicker *gst_pp_model_handle_get_ticker (const GstPpModelHandle *
    handle);
/* Elements currently holding the model behind @handle (1 when not shared). */
guint gst_pp_model_handle_get_users (const GstPpModelHandle * handle);

G_END_DECLS

#endif /* __GST_PP_MODEL_POOL_H__ */
