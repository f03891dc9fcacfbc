/* Hand-made torch.save files: a pickle writer that emits what torch.save emits for a dict of tensors,
 * an in-memory stored zip, a valid bf16 voice-prompt-like file, and a catalogue of malformed ones.
 * Used by test-torch-pt, make-corrupt-pt (the fuzzer's seed corpus) and fuzz-torch-pt. */
#ifndef PPX_PT_FIXTURES_H
#define PPX_PT_FIXTURES_H

#include <glib.h>

#include "format-cases.h"

/* Folder name inside every fixture archive. */
#define PT_FIXTURE_FOLDER "archive"

/* One tensor entry of the pickled dict, described the way _rebuild_tensor_v2 receives it. */
typedef struct {
  const char *name;
  const char *storage_type; /* "BFloat16Storage", "LongStorage", ... */
  const char *key;          /* storage key: the record data/<key> */
  gint64 storage_numel;
  gint64 offset;
  int ndim;
  gint64 shape[8];
  gint64 stride[8];
} PtFixtureTensor;

/* A protocol-2 pickle of {name: tensor, ...} in torch.save's layout (memo puts, reused globals). */
GBytes *pt_fixture_pickle (const PtFixtureTensor *tensors, guint n);

/* A zip of stored (uncompressed) records; names[i] holds datas[i]. */
GBytes *pt_fixture_zip (guint n, const char *const *names, GBytes *const *datas);

/* A whole .pt: PT_FIXTURE_FOLDER/{data.pkl, byteorder, version, data/<key>...} with the given storages. */
GBytes *pt_fixture_file (GBytes *pickle, guint n_storages, const char *const *keys, GBytes *const *storages);

/* The bf16 voice-prompt-shaped file: "embeddings" BF16 [3,1,1,8] (value i -> bf16 of pt_fixture_embedding(i))
 * and "cache" I64 [1,17,4] (value i -> pt_fixture_cache(i)). */
#define PT_FIXTURE_N_FRAMES 3
#define PT_FIXTURE_DIM 8
GBytes *pt_fixture_voice_bf16 (void);
float pt_fixture_embedding (int i);
gint64 pt_fixture_cache (int i);

/* A voice-prompt-shaped file whose "embeddings" BF16 [n_frames, 1, 1, dim] are all zero, their record
 * deflated (a few hundred bytes per MB: a small file that inflates to n_frames * dim * 2 bytes), and a
 * valid "cache" I64 [1, 17, 4] (pt_fixture_cache). Made streaming: the zeros are never all in memory. */
GBytes *pt_fixture_voice_zeros (gint64 n_frames, int dim);

/* Fuzzing over the pickle alone: wraps `pickle` in an archive whose storages are data/0 .. data/3, each
 * PT_FIXTURE_FUZZ_STORAGE_BYTES bytes, so a mutated data.pkl reaches the reader past the zip's CRC. */
#define PT_FIXTURE_FUZZ_STORAGES 4
#define PT_FIXTURE_FUZZ_STORAGE_BYTES 4096
GBytes *pt_fixture_wrap_pickle (const guint8 *pickle, gsize len);

/* A case (format-cases.h): the whole .pt file, or with `is_pickle` a data.pkl for pt_fixture_wrap_pickle. */
typedef FormatCase PtFixtureCase;

/* GPtrArray of PtFixtureCase*, owning them: every corruption the reader must refuse with an error,
 * plus the valid files they start from. */
GPtrArray *pt_fixture_cases (void);

#endif
