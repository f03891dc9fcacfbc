/* personaplex-gst: the bottom of the inference library: the error domain and codes, and the enums of the
 * public API (weight quantization, backend, KV cache format) with their names. Every folder of model/
 * and the public header personaplex.h include it; it includes nothing of the library.
 *
 * Each enum value has one name, as users type it in options, element properties, file metadata and
 * messages; the tables in ppx-types.c are the only place these names are spelled. */
#ifndef PPX_TYPES_H
#define PPX_TYPES_H

#include <glib.h>

G_BEGIN_DECLS

/* Every GError the library sets is in this domain, with one of these codes. */
#define PPX_ERROR (ppx_error_quark ())
GQuark ppx_error_quark (void);

typedef enum {
  PPX_ERROR_IO,          /* a file could not be opened, read or written */
  PPX_ERROR_FORMAT,      /* a file is corrupt, truncated or not what it claims */
  PPX_ERROR_SHAPE,       /* a tensor's shape or dtype does not match the config */
  PPX_ERROR_MISSING,     /* a required tensor, file or key is absent */
  PPX_ERROR_CONFIG,      /* bad configuration values */
  PPX_ERROR_INVALID,     /* bad argument from the caller */
  PPX_ERROR_UNSUPPORTED, /* valid but not supported by this build or backend */
  PPX_ERROR_NOMEM,       /* out of (device) memory */
  PPX_ERROR_LIMIT,       /* an engine already holds max_sessions sessions */
} PpxErrorCode;

/* The LM's weights ("auto", "bf16", "int8", "int4"). */
typedef enum {
  PPX_QUANT_AUTO = 0, /* pre-quantized files as they are, otherwise bf16 */
  PPX_QUANT_BF16,
  PPX_QUANT_INT8,
  PPX_QUANT_INT4,
} PpxQuantization;

/* Where the model runs ("auto", "cpu", "cuda"). */
typedef enum {
  PPX_BACKEND_AUTO = 0, /* CUDA when built and a GPU is present, else CPU */
  PPX_BACKEND_CPU,
  PPX_BACKEND_CUDA,
} PpxBackendKind;

/* How the temporal transformer's KV cache is stored (per session: layers x 2 x context x dim values):
 * "auto", "f32", "bf16", "fp8". */
typedef enum {
  PPX_KV_AUTO = 0, /* the library's default, PPX_KV_DEFAULT */
  PPX_KV_F32,      /* exact reference numerics (golden tests) */
  PPX_KV_BF16,
  PPX_KV_FP8,      /* e4m3, one f32 scale per (position, head); half of bf16's memory */
} PpxKvFormat;

/* The KV format PPX_KV_AUTO stands for: bf16, half of f32's memory; on the golden model it keeps every
 * golden token (docs/quantization.md, "KV cache"). Golden tests that compare with the f32 reference ask
 * for PPX_KV_F32 explicitly. */
#define PPX_KV_DEFAULT PPX_KV_BF16
/* f, with PPX_KV_AUTO resolved to PPX_KV_DEFAULT. */
PpxKvFormat ppx_kv_format_resolve (PpxKvFormat f);

/* Names. X_name gives a value's name ("?" for a value outside the enum); X_from_name the value of a name
 * (FALSE, *out untouched, for an unknown name or NULL); X_names every name, in value order, NULL-terminated
 * (for option checks, help texts and GEnum nicks). */
const char *ppx_quantization_name (PpxQuantization q);
gboolean ppx_quantization_from_name (const char *name, PpxQuantization *out);
const char *const *ppx_quantization_names (void);

const char *ppx_backend_kind_name (PpxBackendKind b);
gboolean ppx_backend_kind_from_name (const char *name, PpxBackendKind *out);
const char *const *ppx_backend_kind_names (void);

const char *ppx_kv_format_name (PpxKvFormat f);
gboolean ppx_kv_format_from_name (const char *name, PpxKvFormat *out);
const char *const *ppx_kv_format_names (void);

/* "a, b or c": the names of a NULL-terminated list as a message says them (g_free). */
char *ppx_names_choice (const char *const *names);

G_END_DECLS
#endif
