/* personaplexduplex: process-wide pool of loaded models, keyed by
 * model-instance-id.
 *
 * Elements that name the same model-instance-id share one PpxModel (the
 * read-only weights); each element still owns its own PpxSession. The pool
 * has its own lock (never the object lock of an element), holds one
 * reference per user and frees the model with its last user. */
#ifndef __GST_PP_MODEL_POOL_H__
#define __GST_PP_MODEL_POOL_H__

#include <glib.h>
#include "personaplex.h"

G_BEGIN_DECLS

typedef struct _GstPpModelHandle GstPpModelHandle;

/* Loads the model described by @params, or, when @instance_id is a
 * non-empty string that another element already loaded, shares that model.
 * Sharing requires the same model-dir, quantization, backend and device;
 * a mismatch is an error that names the id and both settings.
 * While one element loads, others asking for the same id wait for it.
 * Returns NULL and sets @error on failure. */
GstPpModelHandle *gst_pp_model_pool_acquire (const char *instance_id,
    const PpxModelParams * params, GError ** error);

/* Drops this user's reference; the model is freed with its last user. */
void gst_pp_model_pool_release (GstPpModelHandle * handle);

PpxModel *gst_pp_model_handle_get_model (const GstPpModelHandle * handle);

/* Elements currently holding the model behind @handle (1 when not shared). */
guint gst_pp_model_handle_get_users (const GstPpModelHandle * handle);

G_END_DECLS

#endif /* __GST_PP_MODEL_POOL_H__ */
