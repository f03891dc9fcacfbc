/* Loading linear weights from safetensors files that may hold quantized tensors
 * (the file format is described in docs/quantization.md). */
#ifndef PPX_QUANT_LOAD_H
#define PPX_QUANT_LOAD_H

#include "backend.h"
#include "safetensors.h"

G_BEGIN_DECLS

/* __metadata__ keys of a quantized file. */
#define PPX_QUANT_META_FORMAT "ppx.quant.format"         /* "int8" | "int4" */
#define PPX_QUANT_META_VERSION "ppx.quant.version"       /* "1" */
#define PPX_QUANT_META_GROUP_SIZE "ppx.quant.group_size" /* int4 only, e.g. "64" */
#define PPX_QUANT_FORMAT_VERSION "1"

/* Tensor name suffixes of a quantized linear weight `name`. */
#define PPX_QUANT_SUFFIX_Q8 ".q8"
#define PPX_QUANT_SUFFIX_Q4 ".q4"
#define PPX_QUANT_SUFFIX_SCALE ".scale"

/* Which quantization a file holds, from its metadata: PPX_QUANT_BF16 (group size 0) when it has no
 * ppx.quant.format; an error names the file for an unknown format or version or a bad group size. */
gboolean ppx_quant_file_format (const PpxSafetensors *st, PpxQuantization *out, int *group_size, GError **error);

/* Loads the linear weight `name` ([rows, cols]) from st as a backend weight description:
 *  - when the file holds `name.q8`/`name.q4` + `name.scale`, an INT8/INT4 description whose data point
 *    into the mapping (borrow = TRUE); scales stored as F16/BF16, or not 4-byte aligned, are converted
 *    into *owned (then borrow = FALSE). `name.q8` may appear in an int8 or an int4 file, `name.q4` only
 *    in an int4 file. Asking for an explicit quantization other than the file's is an error.
 *  - else the BF16/F32/F16 tensor `name`: when the policy gives `name` a quantized format under `quant`
 *    (ppx_quant_policy_format), it is quantized now into *owned (borrow = FALSE; the int4 group size is
 *    the file's, else the default);
 *    otherwise a BF16/F32 description borrowing the mapping (F16, or misaligned data, is converted
 *    into *owned as F32).
 * *owned is NULL or one g_malloc'd block: g_free it after ppx_weight_new() when borrow is FALSE.
 * Shapes, dtypes and the group size are validated; every error names the file and the tensor. */
gboolean ppx_quant_load_linear (const PpxSafetensors *st, const char *name, int64_t rows, int64_t cols,
                                PpxQuantization quant, PpxWeightDesc *desc, gpointer *owned, GError **error);

G_END_DECLS
#endif
