/* The storage type of a backend tensor, as plain C (no GLib) so that both a C compiler and nvcc include it:
 * the kernels take a KV cache's storage as this type (the library's API names it PpxKvFormat, converted once,
 * by ppx_kv_storage in backend.h, where the engine receives it). */
#ifndef PPX_TENSOR_TYPE_H
#define PPX_TENSOR_TYPE_H

/* BF16 and FP8 are storage types for KV caches (made by ppx_kv_cache_new, read and written by
 * ppx_op_attention); every other op takes F32 or I32 tensors (and refuses others with a critical). */
typedef enum { PPX_TENSOR_F32, PPX_TENSOR_I32, PPX_TENSOR_BF16, PPX_TENSOR_FP8 } PpxTensorType;

#endif
