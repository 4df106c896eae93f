/* pysite.c - Python frames of call and allocation sites.
 *
 * PYCODE records name code objects, PYSTACK records give a STACK its
 * Python frames as (code, line) pairs.  Both are resolved as they stream
 * by into interned locations, so the tables compare locations by
 * pointer and memory grows with the distinct lines, not the copies. */
#include "pysite.h"

#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "trace_data.h"
#include "units.h"

typedef struct plr_pycode {
  uint32_t id;
  uint32_t firstlineno;
  int library;
  char *file, *func;
  UT_hash_handle hh;
} plr_pycode;

typedef struct plr_pyloc_ent {
  plr_pyloc loc;
  char *key; /* file NUL func NUL line, the hash key */
  size_t keylen;
  UT_hash_handle hh;
} plr_pyloc_ent;

typedef struct plr_pystack_ent {
  uint32_t stack_id;
  plr_pysite site;
  UT_hash_handle hh;
} plr_pystack_ent;

struct plr_pytab {
  plr_pycode *codes;
  plr_pyloc_ent *locs;
  plr_pystack_ent *stacks;
};

static struct plr_pytab *plr_py_tab(plr_trace *t) {
  if (!t->py) t->py = calloc(1, sizeof *t->py);
  return t->py;
}

static const plr_pyloc *plr_py_intern(struct plr_pytab *p, const char *file, const char *func,
                                      uint32_t line, int library) {
  char num[16];
  int k = snprintf(num, sizeof num, "%u", line);
  size_t nf = strlen(file) + 1, nn = strlen(func) + 1, len = nf + nn + (size_t)k;
  char *key = malloc(len);
  if (!key) return NULL;
  memcpy(key, file, nf);
  memcpy(key + nf, func, nn);
  memcpy(key + nf + nn, num, (size_t)k);
  plr_pyloc_ent *e;
  HASH_FIND(hh, p->locs, key, len, e);
  if (e) {
    free(key);
    return &e->loc;
  }
  e = calloc(1, sizeof *e);
  if (!e) {
    free(key);
    return NULL;
  }
  e->key = key;
  e->keylen = len;
  e->loc.file = key;
  e->loc.func = key + nf;
  e->loc.line = line;
  e->loc.library = library;
  HASH_ADD_KEYPTR(hh, p->locs, e->key, e->keylen, e);
  return &e->loc;
}

int plr_py_fold(plr_trace *t, const plr_record *rec) {
  struct plr_pytab *p = plr_py_tab(t);
  if (!p) return -1;
  if (rec->type == PAGELOCK_REC_PYCODE) {
    const pagelock_rec_pycode *c = rec->u.pycode;
    plr_pycode *e;
    HASH_FIND(hh, p->codes, &c->id, sizeof c->id, e);
    if (e) return 0; /* a repeat (a forked child's trace starts afresh) */
    e = calloc(1, sizeof *e);
    if (!e) return -1;
    e->id = c->id;
    e->firstlineno = c->firstlineno;
    e->library = (c->flags & PAGELOCK_PYCODE_LIBRARY) != 0;
    e->file = strdup(rec->str1);
    e->func = strdup(rec->str2);
    if (!e->file || !e->func) {
      free(e->file);
      free(e->func);
      free(e);
      return -1;
    }
    HASH_ADD(hh, p->codes, id, sizeof e->id, e);
    return 0;
  }
  const pagelock_rec_pystack *s = rec->u.pystack;
  plr_pystack_ent *e;
  HASH_FIND(hh, p->stacks, &s->stack_id, sizeof s->stack_id, e);
  if (e) return 0;
  e = calloc(1, sizeof *e);
  if (!e) return -1;
  e->stack_id = s->stack_id;
  e->site.flags = s->flags;
  /* The library line comes first in the record; a record with nothing
   * after it names no user line, and it is kept as a frame. */
  int caller = (s->flags & PAGELOCK_PY_CALLER) && s->depth >= 2;
  for (uint32_t i = 0; i < s->depth; i++) {
    const pagelock_py_frame *f = &rec->pyframes[i];
    plr_pycode *c;
    HASH_FIND(hh, p->codes, &f->code, sizeof f->code, c);
    /* Code 0: the shim could not resolve the frame's code (its table was
     * full); a code id with no PYCODE before it: no writer does that.
     * Either way the frame counts, as an unknown place. */
    const plr_pyloc *l =
        plr_py_intern(p, c ? c->file : "?", c ? c->func : "?", f->line, c ? c->library : 0);
    if (!l) {
      free(e);
      return -1;
    }
    if (caller && i == 0)
      e->site.lib = l;
    else
      e->site.f[e->site.depth++] = l;
  }
  HASH_ADD(hh, p->stacks, stack_id, sizeof e->stack_id, e);
  return 0;
}

const plr_pysite *plr_py_site(const plr_trace *t, uint32_t stack_id) {
  if (!t->py || !stack_id) return NULL;
  plr_pystack_ent *e;
  HASH_FIND(hh, t->py->stacks, &stack_id, sizeof stack_id, e);
  return e && e->site.depth ? &e->site : NULL;
}

void plr_py_free(plr_trace *t) {
  struct plr_pytab *p = t->py;
  if (!p) return;
  plr_pycode *c, *ct;
  HASH_ITER(hh, p->codes, c, ct) {
    HASH_DEL(p->codes, c);
    free(c->file);
    free(c->func);
    free(c);
  }
  plr_pyloc_ent *l, *lt;
  HASH_ITER(hh, p->locs, l, lt) {
    HASH_DEL(p->locs, l);
    free(l->key);
    free(l);
  }
  plr_pystack_ent *s, *st;
  HASH_ITER(hh, p->stacks, s, st) {
    HASH_DEL(p->stacks, s);
    free(s);
  }
  free(p);
  t->py = NULL;
}

void plr_pyloc_format(const plr_pyloc *l, char *buf, size_t len) {
  if (l->line == 0 && strcmp(l->file, "?") == 0)
    snprintf(buf, len, "(unresolved Python frame)");
  else
    snprintf(buf, len, "%s:%u in %s", plr_basename(l->file), l->line, l->func);
}

void plr_pyloc_format_lib(const plr_pyloc *l, char *buf, size_t len) {
  const char *f = l->file, *p;
  if ((p = strstr(f, "/site-packages/")) || (p = strstr(f, "/dist-packages/"))) {
    f = p + strlen("/site-packages/");
  } else if ((p = strstr(f, "/lib/python3")) && (p = strchr(p + 1, '/')) &&
             (p = strchr(p + 1, '/'))) {
    f = p + 1; /* past lib/python3.N/ */
  } else {
    plr_pyloc_format(l, buf, len);
    return;
  }
  snprintf(buf, len, "%s:%u in %s", f, l->line, l->func);
}
