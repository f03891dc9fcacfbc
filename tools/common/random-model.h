/* Random models in the published layout, for personaplex-make-model (files in a directory) and
 * personaplex-bench (made in memory).
 *
 * The writers take any path: the bench passes memfd files (anonymous, memory-backed; nothing touches
 * the disk) that the ordinary loaders open through /proc/self/fd/N, so it measures exactly the code
 * paths a model directory takes. Values follow the roles of the tensors (norm gains near 1, small
 * LayerScales and biases, linears uniform within 1/sqrt(fan_in)) so forward passes stay finite; each is
 * a pure function of (seed, tensor name, element index), so the same seed gives identical bytes.
 *
 * The LM can be written in bf16 (as published) or directly pre-quantized as the default policy stores it
 * (quant-policy.h: int8 per row; int4 with groups of 64 for the temporal transformer and int8 for the
 * depformer and the heads), in the personaplex-quantize layout with random codes, so a full-size
 * quantized LM needs only its quantized size in memory (int4 about 5.9 GB instead of 16.7 GB of bf16). */
#ifndef RANDOM_MODEL_H
#define RANDOM_MODEL_H

#include "config.h"
#include "personaplex.h"

G_BEGIN_DECLS

#define RANDOM_MODEL_INT4_GROUP_SIZE 64

/* The sizes of --random-weights: "tiny" (the golden tiny config), "mid" (LM dim 1024, 8 layers,
 * depformer 512 x 2 layers; full-size Mimi) and "full" (PersonaPlex-7B). */
gboolean random_model_config (const char *size, PpxConfig *cfg, GError **error);

/* Bytes of the checkpoint files bench_write_random_* write. */
guint64 random_model_lm_bytes (const PpxLmConfig *cfg, PpxQuantization format);
guint64 random_model_mimi_bytes (const PpxMimiConfig *cfg);

/* An anonymous in-memory file; `path` (/proc/self/fd/N) opens it while the object lives. */
typedef struct {
  int fd;
  char *path;
} MemFile;

MemFile *mem_file_new (const char *label, GError **error);
void mem_file_free (MemFile *f);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (MemFile, mem_file_free)

/* Writes a random LM checkpoint for cfg to path: BF16, or INT8/INT4 pre-quantized (each tensor in the
 * policy's format: NAME.q8|q4 + NAME.scale, the rest bf16, with the format metadata). `progress`: NULL, or
 * the program name under which tensor i of N and MB/s are shown on a terminal (tool-progress.h). */
gboolean random_model_write_lm (const PpxLmConfig *cfg, PpxQuantization format, guint64 seed, const char *path,
                                const char *progress, GError **error);
/* Writes a random Mimi checkpoint (f32) for cfg to path. */
gboolean random_model_write_mimi (const PpxMimiConfig *cfg, guint64 seed, const char *path, const char *progress,
                                  GError **error);
/* Writes cfg as config.json to path. */
gboolean random_model_write_config (const PpxConfig *cfg, const char *path, GError **error);

G_END_DECLS
#endif
