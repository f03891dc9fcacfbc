/* personaplexduplex: process-wide pool of loaded models and their engines
 * (model-instance-id).
 *
 * One global mutex guards the table and is held while a model loads, so a
 * second element asking for the same id waits and then shares the result
 * instead of loading the weights twice. Loads of different ids are
 * serialised too, which also keeps peak memory down while models load.
 * The lock is private to this file and never taken with an element's
 * object lock held by the caller in a way that could invert: elements call
 * in from their state-change function only. */
#include "gstppmodelpool.h"
#include "gstppenums.h"

#include "personaplex.h"

struct _GstPpModelHandle
{
  char *instance_id;            /* NULL for a private (unshared) model */
  char *model_dir;              /* canonical path */
  PpxQuantization quantization;
  PpxBackendKind backend;
  int device;
  int max_sessions;             /* as asked for (0: as many as fit) */
  PpxKvFormat kv_format;        /* as asked for (may be auto) */
  PpxModel *model;
  PpxEngine *engine;
  GstPpTicker *ticker;
  guint users;
};

static GMutex pool_lock;
static GHashTable *pool_table;  /* instance id -> GstPpModelHandle* */

/* The nick of an enum value as gst-inspect shows it (the element's property enums). */
static const char *
enum_nick (GType type, gint value)
{
  GEnumClass *klass = g_type_class_ref (type);
  GEnumValue *v = g_enum_get_value (klass, value);
  const char *nick = v ? v->value_nick : "?";   /* static strings of the registered type */
  g_type_class_unref (klass);
  return nick;
}

#define quantization_nick(q) enum_nick (GST_TYPE_PERSONAPLEX_QUANTIZATION, (q))
#define backend_nick(b) enum_nick (GST_TYPE_PERSONAPLEX_BACKEND, (b))
#define kv_nick(f) enum_nick (GST_TYPE_PERSONAPLEX_KV_CACHE_FORMAT, (f))

static void
handle_free (GstPpModelHandle * h)
{
  gst_pp_ticker_free (h->ticker);
  if (h->engine)
    ppx_engine_unref (h->engine);
  if (h->model)
    ppx_model_unref (h->model);
  g_free (h->instance_id);
  g_free (h->model_dir);
  g_free (h);
}

static GstPpModelHandle *
handle_load (const char *instance_id, const PpxModelParams * params,
    const PpxEngineParams * engine_params, GError ** error)
{
  PpxModel *model = ppx_model_load (params, error);
  PpxEngineParams ep = *engine_params;
  PpxEngine *engine;
  GstPpModelHandle *h;

  if (!model)
    return NULL;
  if (instance_id == NULL)
    ep.max_sessions = 1;
  engine = ppx_engine_new (model, &ep, error);
  if (!engine) {
    ppx_model_unref (model);
    return NULL;
  }
  h = g_new0 (GstPpModelHandle, 1);
  h->instance_id = g_strdup (instance_id);
  h->model_dir = g_canonicalize_filename (params->model_dir, NULL);
  h->quantization = params->quantization;
  h->backend = params->backend;
  h->device = params->device;
  h->max_sessions = engine_params->max_sessions;
  h->kv_format = engine_params->kv_format;
  h->model = model;
  h->engine = engine;
  h->ticker = gst_pp_ticker_new (engine, (gint64) ppx_model_frame_size (model)
      * G_USEC_PER_SEC / ppx_model_sample_rate (model));
  h->users = 1;
  return h;
}

static gboolean
handle_matches (const GstPpModelHandle * h, const PpxModelParams * params,
    const PpxEngineParams * ep, GError ** error)
{
  g_autofree char *dir = g_canonicalize_filename (params->model_dir, NULL);

  if (g_strcmp0 (dir, h->model_dir) == 0
      && params->quantization == h->quantization
      && params->backend == h->backend && params->device == h->device) {
    if (ep->max_sessions == h->max_sessions && ep->kv_format == h->kv_format)
      return TRUE;
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID,
        "model-instance-id '%s' is already used with max-sessions %d, "
        "kv-cache-format %s; this element asks for max-sessions %d, "
        "kv-cache-format %s (elements sharing a model-instance-id share one "
        "engine and must ask for the same one)", h->instance_id,
        h->max_sessions, kv_nick (h->kv_format), ep->max_sessions,
        kv_nick (ep->kv_format));
    return FALSE;
  }
  g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID,
      "model-instance-id '%s' is already used with model-dir '%s', "
      "quantization %s, backend %s, device %d; this element asks for "
      "model-dir '%s', quantization %s, backend %s, device %d (elements "
      "sharing a model-instance-id must load the same model the same way)",
      h->instance_id, h->model_dir, quantization_nick (h->quantization),
      backend_nick (h->backend), h->device, dir,
      quantization_nick (params->quantization), backend_nick (params->backend),
      params->device);
  return FALSE;
}

GstPpModelHandle *
gst_pp_model_pool_acquire (const char *instance_id,
    const PpxModelParams * params, const PpxEngineParams * engine_params,
    GError ** error)
{
  GstPpModelHandle *h;

  g_return_val_if_fail (params != NULL && params->model_dir != NULL, NULL);
  g_return_val_if_fail (engine_params != NULL, NULL);

  if (instance_id == NULL || instance_id[0] == '\0')
    return handle_load (NULL, params, engine_params, error);

  g_mutex_lock (&pool_lock);
  if (!pool_table)
    pool_table = g_hash_table_new (g_str_hash, g_str_equal);
  h = g_hash_table_lookup (pool_table, instance_id);
  if (h) {
    if (handle_matches (h, params, engine_params, error))
      h->users++;
    else
      h = NULL;
  } else {
    h = handle_load (instance_id, params, engine_params, error);
    if (h)
      g_hash_table_insert (pool_table, h->instance_id, h);
  }
  g_mutex_unlock (&pool_lock);
  return h;
}

void
gst_pp_model_pool_release (GstPpModelHandle * h)
{
  if (h == NULL)
    return;
  if (h->instance_id == NULL) {
    handle_free (h);
    return;
  }
  g_mutex_lock (&pool_lock);
  g_assert (h->users > 0);
  if (--h->users == 0) {
    g_hash_table_remove (pool_table, h->instance_id);
    if (g_hash_table_size (pool_table) == 0)
      g_clear_pointer (&pool_table, g_hash_table_unref);
    handle_free (h);
  }
  g_mutex_unlock (&pool_lock);
}

PpxModel *
gst_pp_model_handle_get_model (const GstPpModelHandle * h)
{
  return h->model;
}

PpxEngine *
gst_pp_model_handle_get_engine (const GstPpModelHandle * h)
{
  return h->engine;
}

GstPpTicker *
gst_pp_model_handle_get_ticker (const GstPpModelHandle * h)
{
  return h->ticker;
}

guint
gst_pp_model_handle_get_users (const GstPpModelHandle * h)
{
  guint users;

  if (h->instance_id == NULL)
    return h->users;
  g_mutex_lock (&pool_lock);
  users = h->users;
  g_mutex_unlock (&pool_lock);
  return users;
}
