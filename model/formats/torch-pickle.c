#include "torch-pickle.h"

#include <stdarg.h>

/* Values of the restricted pickle machine. Only dicts are mutable, and a dict may hold only scalars,
 * strings and tensors, so values form a tree-like DAG without cycles; nesting is capped at
 * PPX_PICKLE_MAX_DEPTH, which bounds every recursion below. */
typedef enum {
  VAL_NONE,
  VAL_BOOL,
  VAL_INT,
  VAL_STR,
  VAL_TUPLE,
  VAL_DICT,
  VAL_GLOBAL,
  VAL_STORAGE,
  VAL_TENSOR,
} ValKind;

typedef enum {
  FN_ORDERED_DICT,      /* collections.OrderedDict */
  FN_REBUILD_TENSOR_V2, /* torch._utils._rebuild_tensor_v2 */
  FN_STORAGE_TYPE,      /* torch.<X>Storage, only valid inside a persistent id */
} GlobalFn;

typedef struct Value Value;
struct Value {
  ValKind kind;
  int refs;
  int depth;
  union {
    gboolean b;
    gint64 i;
    char *s;
    struct {
      Value **items;
      guint n;
    } tuple;
    struct {
      GPtrArray *keys; /* Value* (VAL_STR) */
      GPtrArray *vals; /* Value* */
    } dict;
    struct {
      GlobalFn fn;
      PpxDType dtype;
    } global;
    struct {
      PpxDType dtype;
      char *key;
      gint64 numel;
    } storage;
    PpxPickleTensor *tensor; /* name unset */
  } u;
};

static const struct {
  const char *name;
  PpxDType dtype;
} storage_types[] = {
  {"FloatStorage", PPX_DTYPE_F32}, {"DoubleStorage", PPX_DTYPE_F64}, {"HalfStorage", PPX_DTYPE_F16},
  {"BFloat16Storage", PPX_DTYPE_BF16}, {"LongStorage", PPX_DTYPE_I64}, {"IntStorage", PPX_DTYPE_I32},
  {"ShortStorage", PPX_DTYPE_I16}, {"CharStorage", PPX_DTYPE_I8}, {"ByteStorage", PPX_DTYPE_U8},
  {"BoolStorage", PPX_DTYPE_BOOL},
};

typedef struct {
  PpxDType dtype;
  gint64 numel;
} StorageDecl;

typedef struct {
  const guint8 *data;
  gsize size;
  gsize pos;     /* next byte to read */
  gsize op_pos;  /* offset of the opcode being run, for errors */
  const char *label;
  GPtrArray *stack;     /* Value*, owned references */
  guint marks[PPX_PICKLE_MAX_MARKS];
  guint n_marks;
  GHashTable *memo;     /* index -> Value* (owned reference) */
  GHashTable *storages; /* key -> StorageDecl*, every storage seen so far */
  GError **error;
} Machine;

static void
pickle_tensor_clear (PpxPickleTensor *t)
{
  g_free (t->name);
  g_free (t->storage_key);
}

void
ppx_pickle_tensor_free (PpxPickleTensor *t)
{
  if (!t)
    return;
  pickle_tensor_clear (t);
  g_free (t);
}

static Value *
val_new (ValKind kind)
{
  Value *v = g_new0 (Value, 1);
  v->kind = kind;
  v->refs = 1;
  return v;
}

static Value *
val_ref (Value *v)
{
  v->refs++;
  return v;
}

static void
val_unref (Value *v)
{
  if (!v || --v->refs > 0)
    return;
  switch (v->kind) {
  case VAL_STR:
    g_free (v->u.s);
    break;
  case VAL_TUPLE:
    for (guint i = 0; i < v->u.tuple.n; i++)
      val_unref (v->u.tuple.items[i]);
    g_free (v->u.tuple.items);
    break;
  case VAL_DICT:
    g_ptr_array_unref (v->u.dict.keys);
    g_ptr_array_unref (v->u.dict.vals);
    break;
  case VAL_STORAGE:
    g_free (v->u.storage.key);
    break;
  case VAL_TENSOR:
    ppx_pickle_tensor_free (v->u.tensor);
    break;
  default:
    break;
  }
  g_free (v);
}

static const char *
kind_name (ValKind k)
{
  static const char *const names[] = {"None", "bool", "int", "str", "tuple", "dict", "global", "storage", "tensor"};
  return k < G_N_ELEMENTS (names) ? names[k] : "?";
}

G_GNUC_PRINTF (2, 3) static gboolean
fail (Machine *m, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error (m->error, PPX_ERROR, PPX_ERROR_FORMAT, "%s: data.pkl: %s at byte %" G_GSIZE_FORMAT, m->label, msg,
               m->op_pos);
  return FALSE;
}

/* ---- reading the byte stream ---- */

static gboolean
take (Machine *m, gsize n, const guint8 **out)
{
  if (m->size - m->pos < n)
    return fail (m, "truncated (opcode needs %" G_GSIZE_FORMAT " more bytes, %" G_GSIZE_FORMAT " left)", n,
                 m->size - m->pos);
  *out = m->data + m->pos;
  m->pos += n;
  return TRUE;
}

static gboolean
read_uint (Machine *m, guint nbytes, guint32 *out)
{
  const guint8 *p = NULL;
  if (!take (m, nbytes, &p))
    return FALSE;
  guint32 v = 0;
  for (guint i = nbytes; i-- > 0;)
    v = (v << 8) | p[i];
  *out = v;
  return TRUE;
}

/* A newline-terminated GLOBAL argument. */
static gboolean
read_line (Machine *m, char **out)
{
  gsize avail = MIN (m->size - m->pos, (gsize) 256);
  const guint8 *nl = memchr (m->data + m->pos, '\n', avail);
  if (!nl)
    return fail (m, "GLOBAL name not terminated within %" G_GSIZE_FORMAT " bytes", avail);
  gsize len = (gsize) (nl - (m->data + m->pos));
  *out = g_strndup ((const char *) m->data + m->pos, len);
  m->pos += len + 1;
  return TRUE;
}

/* ---- the stack ---- */

static gboolean
push (Machine *m, Value *v)
{
  if (m->stack->len >= PPX_PICKLE_MAX_STACK) {
    val_unref (v);
    return fail (m, "stack deeper than %d entries", PPX_PICKLE_MAX_STACK);
  }
  g_ptr_array_add (m->stack, v);
  return TRUE;
}

static guint
stack_floor (Machine *m)
{
  return m->n_marks ? m->marks[m->n_marks - 1] : 0;
}

/* Pops an owned reference; items under the innermost mark are out of reach, as in CPython. */
static gboolean
pop (Machine *m, Value **out)
{
  if (m->stack->len <= stack_floor (m))
    return fail (m, "stack underflow");
  *out = g_ptr_array_steal_index (m->stack, m->stack->len - 1);
  return TRUE;
}

static gboolean
peek (Machine *m, Value **out)
{
  if (m->stack->len <= stack_floor (m))
    return fail (m, "stack underflow");
  *out = g_ptr_array_index (m->stack, m->stack->len - 1);
  return TRUE;
}

static gboolean
pop_mark (Machine *m, guint *mark)
{
  if (m->n_marks == 0)
    return fail (m, "no MARK to pop to");
  *mark = m->marks[--m->n_marks];
  return TRUE;
}

/* ---- value constructors ---- */

static gboolean
push_tuple_from (Machine *m, guint start)
{
  guint n = m->stack->len - start;
  Value *t = val_new (VAL_TUPLE);
  t->u.tuple.n = n;
  t->u.tuple.items = g_new (Value *, MAX (n, 1));
  for (guint i = 0; i < n; i++) {
    t->u.tuple.items[i] = g_ptr_array_index (m->stack, start + i);
    g_ptr_array_index (m->stack, start + i) = NULL; /* ownership moves to the tuple */
    t->depth = MAX (t->depth, t->u.tuple.items[i]->depth + 1);
  }
  g_ptr_array_set_size (m->stack, start);
  if (t->depth > PPX_PICKLE_MAX_DEPTH) {
    val_unref (t);
    return fail (m, "values nested deeper than %d levels", PPX_PICKLE_MAX_DEPTH);
  }
  return push (m, t);
}

static gboolean
push_small_tuple (Machine *m, guint n)
{
  if (m->stack->len < stack_floor (m) + n)
    return fail (m, "stack underflow");
  return push_tuple_from (m, m->stack->len - n);
}

static Value *
dict_new (void)
{
  Value *d = val_new (VAL_DICT);
  d->depth = 1;
  d->u.dict.keys = g_ptr_array_new_with_free_func ((GDestroyNotify) val_unref);
  d->u.dict.vals = g_ptr_array_new_with_free_func ((GDestroyNotify) val_unref);
  return d;
}

/* Takes ownership of key and val. */
static gboolean
dict_set (Machine *m, Value *d, Value *key, Value *val)
{
  gboolean ok = FALSE;
  if (d->kind != VAL_DICT)
    fail (m, "SETITEM on a %s, not a dict", kind_name (d->kind));
  else if (key->kind != VAL_STR)
    fail (m, "dict key is a %s, not a str", kind_name (key->kind));
  else if (val->kind == VAL_TUPLE || val->kind == VAL_DICT || val->kind == VAL_GLOBAL || val->kind == VAL_STORAGE)
    fail (m, "dict value for '%s' is a %s (only tensors and scalars are supported)", key->u.s, kind_name (val->kind));
  else if (d->u.dict.keys->len >= PPX_PICKLE_MAX_DICT)
    fail (m, "dict has more than %d entries", PPX_PICKLE_MAX_DICT);
  else
    ok = TRUE;
  for (guint i = 0; ok && i < d->u.dict.keys->len; i++) {
    const Value *k = g_ptr_array_index (d->u.dict.keys, i);
    if (strcmp (k->u.s, key->u.s) == 0)
      ok = fail (m, "duplicate dict key '%s'", key->u.s);
  }
  if (!ok) {
    val_unref (key);
    val_unref (val);
    return FALSE;
  }
  g_ptr_array_add (d->u.dict.keys, key);
  g_ptr_array_add (d->u.dict.vals, val);
  return TRUE;
}

static gboolean
push_int (Machine *m, gint64 i)
{
  Value *v = val_new (VAL_INT);
  v->u.i = i;
  return push (m, v);
}

static gboolean
push_str (Machine *m, gsize len)
{
  const guint8 *p = NULL;
  if (!take (m, len, &p))
    return FALSE;
  if (memchr (p, 0, len) || !g_utf8_validate ((const char *) p, (gssize) len, NULL))
    return fail (m, "string is not valid UTF-8 or holds a NUL byte");
  Value *v = val_new (VAL_STR);
  v->u.s = g_strndup ((const char *) p, len);
  return push (m, v);
}

static gboolean
push_global (Machine *m)
{
  g_autofree char *module = NULL, *name = NULL;
  if (!read_line (m, &module) || !read_line (m, &name))
    return FALSE;
  /* The names come from the file and end up in messages: keep only what a Python name may hold. Every
   * allowed name survives this unchanged, and anything with other bytes cannot match one. */
  const char *name_chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.";
  g_strcanon (module, name_chars, '?');
  g_strcanon (name, name_chars, '?');
  Value *v = val_new (VAL_GLOBAL);
  if (strcmp (module, "collections") == 0 && strcmp (name, "OrderedDict") == 0) {
    v->u.global.fn = FN_ORDERED_DICT;
    return push (m, v);
  }
  if (strcmp (module, "torch._utils") == 0 && strcmp (name, "_rebuild_tensor_v2") == 0) {
    v->u.global.fn = FN_REBUILD_TENSOR_V2;
    return push (m, v);
  }
  if (strcmp (module, "torch") == 0) {
    for (guint i = 0; i < G_N_ELEMENTS (storage_types); i++) {
      if (strcmp (name, storage_types[i].name) == 0) {
        v->u.global.fn = FN_STORAGE_TYPE;
        v->u.global.dtype = storage_types[i].dtype;
        return push (m, v);
      }
    }
    val_unref (v);
    return fail (m, "unsupported storage type 'torch.%s'", name);
  }
  val_unref (v);
  return fail (m, "global '%s.%s' is not allowed", module, name);
}

/* ---- memo ---- */

static gboolean
memo_put (Machine *m, guint32 index)
{
  Value *top = NULL;
  if (!peek (m, &top))
    return FALSE;
  if (!g_hash_table_contains (m->memo, GUINT_TO_POINTER (index)) &&
      g_hash_table_size (m->memo) >= PPX_PICKLE_MAX_MEMO)
    return fail (m, "more than %d memo entries", PPX_PICKLE_MAX_MEMO);
  g_hash_table_replace (m->memo, GUINT_TO_POINTER (index), val_ref (top));
  return TRUE;
}

static gboolean
memo_get (Machine *m, guint32 index)
{
  Value *v = g_hash_table_lookup (m->memo, GUINT_TO_POINTER (index));
  if (!v)
    return fail (m, "memo entry %u was never stored", index);
  return push (m, val_ref (v));
}

/* ---- torch semantics ---- */

static gboolean
valid_storage_key (const char *key)
{
  gsize len = strlen (key);
  if (len == 0 || len > PPX_PICKLE_MAX_KEY)
    return FALSE;
  for (gsize i = 0; i < len; i++)
    if (!g_ascii_isalnum (key[i]) && key[i] != '_')
      return FALSE;
  return TRUE;
}

/* BINPERSID: ('storage', torch.<X>Storage, key, location, numel) -> a storage reference. */
static gboolean
persistent_load (Machine *m)
{
  Value *pid = NULL;
  if (!pop (m, &pid))
    return FALSE;
  gboolean ok = FALSE;
  Value **it = pid->u.tuple.items;
  if (pid->kind != VAL_TUPLE || pid->u.tuple.n != 5 || it[0]->kind != VAL_STR || strcmp (it[0]->u.s, "storage") != 0)
    fail (m, "persistent id is not a ('storage', type, key, location, numel) tuple");
  else if (it[1]->kind != VAL_GLOBAL || it[1]->u.global.fn != FN_STORAGE_TYPE)
    fail (m, "persistent id does not name a torch storage type");
  else if (it[2]->kind != VAL_STR || !valid_storage_key (it[2]->u.s))
    fail (m, "storage key is not a short alphanumeric string");
  else if (it[3]->kind != VAL_STR)
    fail (m, "storage location is not a string");
  else if (it[4]->kind != VAL_INT || it[4]->u.i < 0)
    fail (m, "storage size is not a non-negative integer");
  else
    ok = TRUE;
  if (!ok) {
    val_unref (pid);
    return FALSE;
  }
  const StorageDecl *seen = g_hash_table_lookup (m->storages, it[2]->u.s);
  if (seen && (seen->dtype != it[1]->u.global.dtype || seen->numel != it[4]->u.i)) {
    fail (m, "storage '%s' is declared twice with different types or sizes", it[2]->u.s);
    val_unref (pid);
    return FALSE;
  }
  Value *s = val_new (VAL_STORAGE);
  s->u.storage.dtype = it[1]->u.global.dtype;
  s->u.storage.key = g_strdup (it[2]->u.s);
  s->u.storage.numel = it[4]->u.i;
  val_unref (pid);
  if (!seen) {
    StorageDecl *decl = g_new (StorageDecl, 1);
    decl->dtype = s->u.storage.dtype;
    decl->numel = s->u.storage.numel;
    g_hash_table_insert (m->storages, g_strdup (s->u.storage.key), decl);
  }
  return push (m, s);
}

static gboolean
int_tuple (const Value *v, int max_len)
{
  if (v->kind != VAL_TUPLE || v->u.tuple.n > (guint) max_len)
    return FALSE;
  for (guint i = 0; i < v->u.tuple.n; i++)
    if (v->u.tuple.items[i]->kind != VAL_INT || v->u.tuple.items[i]->u.i < 0)
      return FALSE;
  return TRUE;
}

/* _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]) */
static Value *
rebuild_tensor (Machine *m, const Value *args)
{
  Value *const *a = args->u.tuple.items;
  guint n = args->u.tuple.n;
  if (n != 6 && n != 7) {
    fail (m, "_rebuild_tensor_v2 called with %u arguments (6 or 7 expected)", n);
    return NULL;
  }
  if (a[0]->kind != VAL_STORAGE) {
    fail (m, "_rebuild_tensor_v2: first argument is a %s, not a storage", kind_name (a[0]->kind));
    return NULL;
  }
  if (a[1]->kind != VAL_INT || a[1]->u.i < 0) {
    fail (m, "_rebuild_tensor_v2: storage offset is not a non-negative integer");
    return NULL;
  }
  if (!int_tuple (a[2], PPX_PT_MAX_DIMS) || !int_tuple (a[3], PPX_PT_MAX_DIMS) ||
      a[2]->u.tuple.n != a[3]->u.tuple.n) {
    fail (m, "_rebuild_tensor_v2: size and stride must be tuples of the same length (at most %d) of non-negative integers",
          PPX_PT_MAX_DIMS);
    return NULL;
  }
  if (a[4]->kind != VAL_BOOL || a[5]->kind != VAL_DICT || (n == 7 && a[6]->kind != VAL_DICT && a[6]->kind != VAL_NONE)) {
    fail (m, "_rebuild_tensor_v2: requires_grad, backward_hooks or metadata of the wrong type");
    return NULL;
  }
  if (a[5]->u.dict.keys->len != 0) {
    fail (m, "_rebuild_tensor_v2: backward hooks are not supported");
    return NULL;
  }
  PpxPickleTensor *t = g_new0 (PpxPickleTensor, 1);
  t->dtype = a[0]->u.storage.dtype;
  t->storage_key = g_strdup (a[0]->u.storage.key);
  t->storage_numel = a[0]->u.storage.numel;
  t->offset = a[1]->u.i;
  t->ndim = (int) a[2]->u.tuple.n;
  for (int d = 0; d < t->ndim; d++) {
    t->shape[d] = a[2]->u.tuple.items[d]->u.i;
    t->stride[d] = a[3]->u.tuple.items[d]->u.i;
  }
  Value *v = val_new (VAL_TENSOR);
  v->depth = 1;
  v->u.tensor = t;
  return v;
}

static gboolean
reduce (Machine *m)
{
  Value *args = NULL, *fn = NULL, *result = NULL;
  if (!pop (m, &args))
    return FALSE;
  if (!pop (m, &fn)) {
    val_unref (args);
    return FALSE;
  }
  if (fn->kind != VAL_GLOBAL)
    fail (m, "REDUCE on a %s, not a global", kind_name (fn->kind));
  else if (args->kind != VAL_TUPLE)
    fail (m, "REDUCE arguments are a %s, not a tuple", kind_name (args->kind));
  else if (fn->u.global.fn == FN_ORDERED_DICT) {
    if (args->u.tuple.n == 0)
      result = dict_new ();
    else
      fail (m, "OrderedDict called with arguments");
  } else if (fn->u.global.fn == FN_REBUILD_TENSOR_V2)
    result = rebuild_tensor (m, args);
  else
    fail (m, "a storage type is called directly");
  val_unref (args);
  val_unref (fn);
  return result ? push (m, result) : FALSE;
}

static gboolean
set_items (Machine *m)
{
  guint mark = 0;
  if (!pop_mark (m, &mark))
    return FALSE;
  guint n = m->stack->len - mark;
  if (n % 2 != 0)
    return fail (m, "SETITEMS with an odd number (%u) of keys and values", n);
  if (mark <= stack_floor (m))
    return fail (m, "SETITEMS without a dict under the MARK");
  Value *d = g_ptr_array_index (m->stack, mark - 1);
  if (d->kind != VAL_DICT)
    return fail (m, "SETITEMS on a %s, not a dict", kind_name (d->kind));
  for (guint i = 0; i < n; i += 2) {
    Value *key = g_ptr_array_index (m->stack, mark + i);
    Value *val = g_ptr_array_index (m->stack, mark + i + 1);
    g_ptr_array_index (m->stack, mark + i) = NULL;
    g_ptr_array_index (m->stack, mark + i + 1) = NULL;
    if (!dict_set (m, d, key, val)) {
      g_ptr_array_set_size (m->stack, mark); /* drops the pairs not yet consumed */
      return FALSE;
    }
  }
  g_ptr_array_set_size (m->stack, mark);
  return TRUE;
}

static gboolean
set_item (Machine *m)
{
  Value *key = NULL, *val = NULL, *d = NULL;
  if (!pop (m, &val))
    return FALSE;
  if (!pop (m, &key)) {
    val_unref (val);
    return FALSE;
  }
  if (!peek (m, &d)) {
    val_unref (key);
    val_unref (val);
    return FALSE;
  }
  return dict_set (m, d, key, val);
}

/* BUILD is accepted only as a no-op: an empty or None state. */
static gboolean
build (Machine *m)
{
  Value *state = NULL, *obj = NULL;
  if (!pop (m, &state))
    return FALSE;
  gboolean empty = state->kind == VAL_NONE || (state->kind == VAL_DICT && state->u.dict.keys->len == 0) ||
                   (state->kind == VAL_TUPLE && state->u.tuple.n == 0);
  val_unref (state);
  if (!empty)
    return fail (m, "BUILD with a non-empty state is not supported");
  return peek (m, &obj);
}

static gboolean
long1 (Machine *m)
{
  guint32 n = 0;
  const guint8 *p = NULL;
  if (!read_uint (m, 1, &n) || !take (m, n, &p))
    return FALSE;
  if (n > 8)
    return fail (m, "LONG1 integer of %u bytes is too large", n);
  guint64 u = 0;
  for (guint i = n; i-- > 0;)
    u = (u << 8) | p[i];
  if (n > 0 && n < 8 && (p[n - 1] & 0x80))
    u |= ~(guint64) 0 << (8 * n); /* sign-extend */
  return push_int (m, (gint64) u);
}

/* Runs one opcode; sets *stop at STOP. */
static gboolean
step (Machine *m, gboolean *stop)
{
  m->op_pos = m->pos;
  const guint8 *p = NULL;
  guint32 u = 0;
  if (!take (m, 1, &p))
    return FALSE;
  guint8 op = p[0];
  switch (op) {
  case 0x80: /* PROTO */
    if (!read_uint (m, 1, &u))
      return FALSE;
    if (u < 2 || u > 5)
      return fail (m, "pickle protocol %u is not supported", u);
    return TRUE;
  case '.': /* STOP */
    *stop = TRUE;
    return TRUE;
  case '(': /* MARK */
    if (m->n_marks >= PPX_PICKLE_MAX_MARKS)
      return fail (m, "MARKs nested deeper than %d", PPX_PICKLE_MAX_MARKS);
    m->marks[m->n_marks++] = m->stack->len;
    return TRUE;
  case '}': /* EMPTY_DICT */
    return push (m, dict_new ());
  case ')': /* EMPTY_TUPLE */
    return push_tuple_from (m, m->stack->len);
  case 't': /* TUPLE */
    if (!pop_mark (m, &u))
      return FALSE;
    return push_tuple_from (m, u);
  case 0x85: /* TUPLE1 */
  case 0x86: /* TUPLE2 */
  case 0x87: /* TUPLE3 */
    return push_small_tuple (m, op - 0x84);
  case 'N': /* NONE */
    return push (m, val_new (VAL_NONE));
  case 0x88: /* NEWTRUE */
  case 0x89: /* NEWFALSE */ {
    Value *v = val_new (VAL_BOOL);
    v->u.b = op == 0x88;
    return push (m, v);
  }
  case 'K': /* BININT1 */
    return read_uint (m, 1, &u) && push_int (m, u);
  case 'M': /* BININT2 */
    return read_uint (m, 2, &u) && push_int (m, u);
  case 'J': /* BININT */
    return read_uint (m, 4, &u) && push_int (m, (gint32) u);
  case 0x8a: /* LONG1 */
    return long1 (m);
  case 'X': /* BINUNICODE */
    return read_uint (m, 4, &u) && push_str (m, u);
  case 0x8c: /* SHORT_BINUNICODE */
    return read_uint (m, 1, &u) && push_str (m, u);
  case 'q': /* BINPUT */
    return read_uint (m, 1, &u) && memo_put (m, u);
  case 'r': /* LONG_BINPUT */
    return read_uint (m, 4, &u) && memo_put (m, u);
  case 0x94: /* MEMOIZE */
    return memo_put (m, g_hash_table_size (m->memo));
  case 'h': /* BINGET */
    return read_uint (m, 1, &u) && memo_get (m, u);
  case 'j': /* LONG_BINGET */
    return read_uint (m, 4, &u) && memo_get (m, u);
  case 'c': /* GLOBAL */
    return push_global (m);
  case 'Q': /* BINPERSID */
    return persistent_load (m);
  case 'R': /* REDUCE */
    return reduce (m);
  case 's': /* SETITEM */
    return set_item (m);
  case 'u': /* SETITEMS */
    return set_items (m);
  case 'b': /* BUILD */
    return build (m);
  default:
    return fail (m, "unsupported pickle opcode 0x%02x", op);
  }
}

static GPtrArray *
collect_tensors (Machine *m, Value *root)
{
  if (root->kind != VAL_DICT) {
    fail (m, "the saved object is a %s, not a dict of tensors", kind_name (root->kind));
    return NULL;
  }
  GPtrArray *out = g_ptr_array_new_with_free_func ((GDestroyNotify) ppx_pickle_tensor_free);
  for (guint i = 0; i < root->u.dict.keys->len; i++) {
    const Value *k = g_ptr_array_index (root->u.dict.keys, i);
    const Value *v = g_ptr_array_index (root->u.dict.vals, i);
    if (v->kind != VAL_TENSOR)
      continue;
    if (out->len >= PPX_PT_MAX_TENSORS) {
      fail (m, "more than %d tensors", PPX_PT_MAX_TENSORS);
      g_ptr_array_unref (out);
      return NULL;
    }
    PpxPickleTensor *t = g_memdup2 (v->u.tensor, sizeof *t);
    t->name = g_strdup (k->u.s);
    t->storage_key = g_strdup (v->u.tensor->storage_key);
    g_ptr_array_add (out, t);
  }
  return out;
}

GPtrArray *
ppx_torch_unpickle (const guint8 *data, gsize size, const char *label, GError **error)
{
  Machine m = {
    .data = data,
    .size = size,
    .label = label,
    .stack = g_ptr_array_new_with_free_func ((GDestroyNotify) val_unref),
    .memo = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) val_unref),
    .storages = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free),
    .error = error,
  };
  GPtrArray *out = NULL;
  gboolean stop = FALSE, ok = TRUE;
  if (size > PPX_PT_MAX_PICKLE_BYTES)
    ok = fail (&m, "pickle of %" G_GSIZE_FORMAT " bytes exceeds the limit of %u", size, PPX_PT_MAX_PICKLE_BYTES);
  while (ok && !stop) {
    if (m.pos == m.size) {
      m.op_pos = m.pos;
      ok = fail (&m, "ends without a STOP opcode (truncated?)");
    } else {
      ok = step (&m, &stop);
    }
  }
  if (ok && m.pos != m.size)
    ok = fail (&m, "%" G_GSIZE_FORMAT " trailing bytes after STOP", m.size - m.pos);
  if (ok && (m.stack->len != 1 || m.n_marks != 0))
    ok = fail (&m, "STOP with %u values and %u MARKs on the stack (1 value expected)", m.stack->len, m.n_marks);
  if (ok)
    out = collect_tensors (&m, g_ptr_array_index (m.stack, 0));
  g_hash_table_unref (m.storages);
  g_hash_table_unref (m.memo);
  g_ptr_array_unref (m.stack);
  return out;
}
