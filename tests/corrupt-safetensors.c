#include "corrupt-safetensors.h"

#include "safetensors.h"

#include <string.h>

static void
add_raw (GPtrArray *cases, const char *name, const void *data, gsize len, const char *expect, const char *tensor)
{
  format_case_add (cases, name, g_bytes_new (data, len), expect)->tensor = tensor;
}

/* A file whose 8-byte length prefix says `declared_len`, followed by `header` (header_len bytes, may hold NULs)
 * and `data_len` bytes of data. */
static void
add_file (GPtrArray *cases, const char *name, guint64 declared_len, const char *header, gsize header_len,
          gsize data_len, const char *expect, const char *tensor)
{
  GByteArray *b = g_byte_array_new ();
  guint8 prefix[8];
  for (int i = 0; i < 8; i++)
    prefix[i] = (guint8) (declared_len >> (8 * i));
  g_byte_array_append (b, prefix, 8);
  g_byte_array_append (b, (const guint8 *) header, (guint) header_len);
  for (gsize i = 0; i < data_len; i++) {
    guint8 v = (guint8) (i * 37 + 11);
    g_byte_array_append (b, &v, 1);
  }
  add_raw (cases, name, b->data, b->len, expect, tensor);
  g_byte_array_unref (b);
}

/* The common case: a well-formed length prefix over a JSON header. */
static void
add_json (GPtrArray *cases, const char *name, const char *json, gsize data_len, const char *expect,
          const char *tensor)
{
  gsize n = strlen (json);
  add_file (cases, name, n, json, n, data_len, expect, tensor);
}

GPtrArray *
ppx_corrupt_safetensors_cases (void)
{
  GPtrArray *c = format_cases_new ();

  /* Valid edge cases: the reader must accept these. */
  add_json (c, "valid-empty-header", "{}", 0, NULL, NULL);
  add_json (c, "valid-padded-header", "{}      ", 0, NULL, NULL);
  add_json (c, "valid-metadata-only", "{\"__metadata__\":{\"format\":\"pt\"}}", 0, NULL, NULL);
  add_json (c, "valid-two-tensors",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[8,16]}}",
            16, NULL, NULL);
  add_json (c, "valid-zero-sized", "{\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
            "\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]}}", 8, NULL, NULL);

  /* Framing. */
  add_raw (c, "empty-file", "", 0, "too short", NULL);
  add_raw (c, "five-bytes", "\x02\0\0\0\0", 5, "too short", NULL);
  add_file (c, "header-length-zero", 0, "", 0, 4, "header length 0 is invalid", NULL);
  add_file (c, "header-longer-than-file", 1000, "{}", 2, 0, "header length 1000 is invalid", NULL);
  add_file (c, "header-length-huge", (guint64) PPX_ST_MAX_HEADER + 1, "{}", 2, 0, "header length 104857601", NULL);
  add_file (c, "header-length-max-u64", G_MAXUINT64, "{}", 2, 0, "header length 18446744073709551615", NULL);

  /* Header text. */
  add_json (c, "header-not-json", "{not json at all", 0, "not valid JSON", NULL);
  add_json (c, "header-second-object", "{} {\"a\":1}", 0, "unexpected data after the JSON object", NULL);
  add_json (c, "header-trailing-garbage", "{}  x", 0, "not valid JSON", NULL);
  add_json (c, "header-is-array", "[1, 2, 3]", 0, "not a JSON object", NULL);
  add_json (c, "header-is-number", "42", 0, "not a JSON object", NULL);
  add_file (c, "header-nul-byte", 6, "{\"a\0\"}", 6, 0, "not valid JSON", NULL);
  add_json (c, "header-invalid-utf8", "{\"\xff\xfe\":1}", 0, "not valid JSON", NULL);
  {
    GString *deep = g_string_new ("");
    for (int i = 0; i < 1000; i++)
      g_string_append_c (deep, '[');
    add_json (c, "header-deeply-nested", deep->str, 0, "nested", NULL);
    g_string_free (deep, TRUE);
  }

  /* Metadata. */
  add_json (c, "metadata-not-object", "{\"__metadata__\":[\"a\"]}", 0, "__metadata__ is not an object", NULL);
  add_json (c, "metadata-value-not-string", "{\"__metadata__\":{\"version\":1}}", 0, "'version' is not a string",
            NULL);

  /* Tensor entries. */
  add_json (c, "entry-not-object", "{\"w\":5}", 0, "not an object", "w");
  add_json (c, "dtype-missing", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype", "w");
  add_json (c, "dtype-not-string", "{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype", "w");
  add_json (c, "dtype-unknown", "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
            "unknown dtype 'F8_E4M3'", "w");
  add_json (c, "shape-missing", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "shape", "w");
  add_json (c, "shape-negative", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
            "shape entry 0 is not a non-negative integer", "w");
  add_json (c, "shape-fraction", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,1.5],\"data_offsets\":[0,4]}}", 4,
            "shape entry 1 is not a non-negative integer", "w");
  add_json (c, "shape-string", "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8,
            "shape entry 0", "w");
  add_json (c, "shape-too-many-dims",
            "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "9 dimensions",
            "w");
  add_json (c, "shape-overflow",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
            "overflows", "w");
  add_json (c, "shape-overflow-signed",
            "{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,2147483648,0],\"data_offsets\":[0,0]}}", 0, "overflows",
            "w");
  add_json (c, "shape-bytes-overflow",
            "{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}", 8, "overflows", "w");
  add_json (c, "offsets-missing", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "data_offsets", "w");
  add_json (c, "offsets-one-number", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4,
            "data_offsets must be two", "w");
  add_json (c, "offsets-negative", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4,
            "data_offsets must be two non-negative integers", "w");
  add_json (c, "offsets-past-end", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
            "truncated", "w");
  add_json (c, "offsets-begin-after-end", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
            "data_offsets [8, 4]", "w");
  add_json (c, "offsets-span-mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24,
            "shape [2, 3] of F32 needs 24 bytes but data_offsets span 20", "w");
  add_json (c, "offsets-overlap",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
            12, "overlap", "a");
  add_json (c, "offsets-same-range",
            "{\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
            4, "overlap", "b");
  add_json (c, "duplicate-tensor",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
            8, "appears twice", "a");
  add_json (c, "duplicate-key-in-entry",
            "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
            "duplicate key 'dtype'", NULL);
  return c;
}
