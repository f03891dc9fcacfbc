#include "run-element.h"

#include "ppx-common.h"

/* Defined by the plugin's GST_PLUGIN_DEFINE, built here with GST_PLUGIN_BUILD_STATIC. */
GST_PLUGIN_STATIC_DECLARE (personaplex);

gboolean
run_element_register (GError **error)
{
  /* Replaces a personaplexduplex that the registry may hold from an installed plugin: the program runs
   * the element it was built with. */
  GST_PLUGIN_STATIC_REGISTER (personaplex);
  g_autoptr (GstElementFactory) factory = gst_element_factory_find (RUN_ELEMENT_NAME);
  g_autoptr (GstPlugin) plugin = factory ? gst_plugin_feature_get_plugin (GST_PLUGIN_FEATURE (factory)) : NULL;
  if (plugin && !gst_plugin_get_filename (plugin))
    return TRUE;
  g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "the built-in GStreamer element " RUN_ELEMENT_NAME
               " could not be registered (run with GST_DEBUG=2 for GStreamer's reason)");
  return FALSE;
}

/* Sets an int or float property, refusing a value outside the element's range with the option's name
 * (`also`: what else the option takes, or ""). */
static gboolean
set_in_range (GstElement *element, const char *property, const char *option, double value, const char *also,
              GError **error)
{
  GParamSpec *spec = g_object_class_find_property (G_OBJECT_GET_CLASS (element), property);
  g_return_val_if_fail (G_IS_PARAM_SPEC_INT (spec) || G_IS_PARAM_SPEC_FLOAT (spec), FALSE);
  GValue v = G_VALUE_INIT;
  g_value_init (&v, spec->value_type);
  if (G_IS_PARAM_SPEC_INT (spec))
    g_value_set_int (&v, (int) CLAMP (value, G_MININT, G_MAXINT));
  else
    g_value_set_float (&v, (float) value);
  gboolean out_of_range = g_param_value_validate (spec, &v);
  if (out_of_range) {
    /* integers as the integers they are (2147483647, not 2.14748e+09) */
    const char *fmt = G_IS_PARAM_SPEC_INT (spec) ? "%.0f" : "%g";
    double lo = G_IS_PARAM_SPEC_INT (spec) ? G_PARAM_SPEC_INT (spec)->minimum : G_PARAM_SPEC_FLOAT (spec)->minimum;
    double hi = G_IS_PARAM_SPEC_INT (spec) ? G_PARAM_SPEC_INT (spec)->maximum : G_PARAM_SPEC_FLOAT (spec)->maximum;
    g_autofree char *shown = g_strdup_printf (fmt, value), *from = g_strdup_printf (fmt, lo),
                    *to = g_strdup_printf (fmt, hi);
    g_set_error (error, PPX_ERROR, PPX_ERROR_INVALID, "%s %s: the " RUN_ELEMENT_NAME " element takes %s .. %s%s",
                 option, shown, from, to, also);
  } else {
    g_object_set_property (G_OBJECT (element), property, &v);
  }
  g_value_unset (&v);
  return !out_of_range;
}

/* The element's largest top-k: the whole vocabulary of PersonaPlex (text 32000, audio 2048) and of any
 * model smaller than that, as the library's 0 means (it takes top-k > vocabulary as all of it). */
static int
topk_all (GstElement *element, const char *property)
{
  GParamSpec *spec = g_object_class_find_property (G_OBJECT_GET_CLASS (element), property);
  return G_PARAM_SPEC_INT (spec)->maximum;
}

static char *
token_list (const RunSettings *s)
{
  if (s->n_text_prompt_tokens <= 0)
    return NULL;
  GString *ids = g_string_new (NULL);
  for (int i = 0; i < s->n_text_prompt_tokens; i++)
    g_string_append_printf (ids, i ? ",%d" : "%d", s->text_prompt_tokens[i]);
  return g_string_free (ids, FALSE);
}

gboolean
run_element_configure (GstElement *element, const RunSettings *s, GError **error)
{
  if (s->voice_cache_dir) {
    if (!g_object_class_find_property (G_OBJECT_GET_CLASS (element), "voice-cache-dir")) {
      g_set_error (error, PPX_ERROR, PPX_ERROR_UNSUPPORTED, "--voice-cache-dir %s: the " RUN_ELEMENT_NAME
                   " element has no voice-cache-dir property yet; run without it", s->voice_cache_dir);
      return FALSE;
    }
    g_object_set (element, "voice-cache-dir", s->voice_cache_dir, NULL);
  }
  g_autofree char *tokens = token_list (s);
  /* The element's enums have the library's values (gst/gstppenums.c). */
  g_object_set (element, "model-dir", s->model_dir, "voice-prompt", s->voice_prompt, "voice-normalize",
                s->voice_normalize, "text-prompt", s->text_prompt, "text-prompt-tokens", tokens, "greedy", s->greedy,
                "seed", s->seed, "quantization", (int) s->quantization, "backend", (int) s->backend,
                "kv-cache-format", (int) s->kv_cache_format,
                "frame-messages", TRUE, "stats-interval", 0u, NULL);
  const char *all = " (or 0: the whole vocabulary)";
  return set_in_range (element, "temp-audio", "--temp-audio", s->temp_audio, "", error) &&
         set_in_range (element, "temp-text", "--temp-text", s->temp_text, "", error) &&
         set_in_range (element, "topk-audio", "--topk-audio",
                       s->topk_audio ? s->topk_audio : topk_all (element, "topk-audio"), all, error) &&
         set_in_range (element, "topk-text", "--topk-text",
                       s->topk_text ? s->topk_text : topk_all (element, "topk-text"), all, error) &&
         set_in_range (element, "device", "--device", s->device, "", error);
}
