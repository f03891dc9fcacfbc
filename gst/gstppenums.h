/* personaplexduplex: GEnum types of the element's properties. */
#ifndef __GST_PP_ENUMS_H__
#define __GST_PP_ENUMS_H__

#include <glib-object.h>

G_BEGIN_DECLS

/* Values equal PpxQuantization, PpxBackendKind and PpxKvFormat
 * (model/ppx-types.h, which names them). */
#define GST_TYPE_PERSONAPLEX_QUANTIZATION (gst_personaplex_quantization_get_type ())
GType gst_personaplex_quantization_get_type (void);

#define GST_TYPE_PERSONAPLEX_BACKEND (gst_personaplex_backend_get_type ())
GType gst_personaplex_backend_get_type (void);

#define GST_TYPE_PERSONAPLEX_KV_CACHE_FORMAT \
  (gst_personaplex_kv_cache_format_get_type ())
GType gst_personaplex_kv_cache_format_get_type (void);

G_END_DECLS

#endif /* __GST_PP_ENUMS_H__ */
