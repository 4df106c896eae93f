/* test_reader_checksum.c - checksummed traces: read the same as plain
 * ones, every damaged byte caught, a trace cut anywhere not taken for
 * damage, each kind of damage named (reader_fixture.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "reader_fixture.h"

/* Loads bytes through fmemopen (fast enough to do thousands of times). */
static int load_mem(plr_trace *t, const unsigned char *p, size_t len, char *msg, size_t msglen) {
  FILE *f = fmemopen((void *)p, len, "rb");
  assert_non_null(f);
  return plr_trace_load_stream(t, f, "mem.trace", msg, msglen);
}

/* A checksummed trace reads exactly like the same trace without CHECK
 * records: same records, same numbers, not partial. */
static void test_checksummed_reads_the_same(void **state) {
  (void)state;
  tb plain = {0}, ck = {0};
  build_reference(&plain, 1);
  size_t nblocks;
  tb_checksum(&plain, 3, &ck, NULL, &nblocks);
  plr_trace a, c;
  assert_int_equal(load(&a, &plain), 0);
  assert_int_equal(load(&c, &ck), 0);
  assert_false(plr_trace_partial(&c));
  assert_int_equal(c.stop, PLR_STOP_END);
  assert_int_equal(c.blocks, nblocks);
  assert_false(c.unverified);
  assert_int_equal(c.malformed_records, 0);
  assert_int_equal(c.unknown_records, 0);
  /* END is in the last block: every CHECK before it is counted. */
  assert_int_equal(c.complete_records, a.complete_records + nblocks - 1);
  assert_memory_equal(&c.tot, &a.tot, sizeof a.tot);
  assert_int_equal(c.nmodules, a.nmodules);
  assert_string_equal(c.exe, a.exe);
  plr_trace_free(&a);
  plr_trace_free(&c);
  tb_free(&plain);
  tb_free(&ck);
}

/* The block of a checksummed trace that holds file offset `at`. */
static size_t block_of(const uint64_t *starts, size_t n, uint64_t at) {
  size_t k = 0;
  while (k + 1 < n && starts[k + 1] <= at) k++;
  return k;
}

/* The "about 60% of corruptions in the middle of a trace go
 * unnoticed", turned around: every single-byte change after the header of
 * a checksummed trace (three values at every offset) is reported as damage
 * from the start of the block that holds it, and the report keeps exactly
 * the records before that block.  The same changes to the trace without
 * CHECK records are counted for comparison. */
static void test_checksum_catches_every_byte(void **state) {
  (void)state;
  tb plain = {0}, ck = {0};
  build_reference(&plain, 1);
  uint64_t starts[64];
  size_t nb;
  tb_checksum(&plain, 2, &ck, starts, &nb);
  assert_true(nb < 64);
  /* What the report must keep when block k is damaged: the trace cut at
   * its start, which reads cleanly (EOF at a boundary). */
  plr_trace before[64];
  char msg[1024];
  for (size_t k = 0; k < nb; k++) {
    assert_int_equal(load_mem(&before[k], ck.p, starts[k], msg, sizeof msg), 0);
    assert_int_equal(before[k].stop, PLR_STOP_EOF);
  }
  static const unsigned char how[3] = {0x01, 0x80, 0xff}; /* xor masks */
  unsigned char *m = malloc(ck.len);
  assert_non_null(m);
  size_t tried = 0;
  for (size_t at = sizeof(pagelock_file_header); at < ck.len; at++) {
    size_t k = block_of(starts, nb, at);
    for (int v = 0; v < 3; v++) {
      memcpy(m, ck.p, ck.len);
      m[at] ^= how[v];
      plr_trace t;
      assert_int_equal(load_mem(&t, m, ck.len, msg, sizeof msg), 0);
      if (t.stop != PLR_STOP_DAMAGED || t.damage.from != starts[k]) {
        fprintf(stderr,
                "byte %zu ^ 0x%02x (block %zu at %llu): stop %d from "
                "%llu\n",
                at, how[v], k, (unsigned long long)starts[k], t.stop,
                (unsigned long long)t.damage.from);
        fail();
      }
      assert_true(plr_trace_partial(&t));
      assert_int_equal(t.complete_records, before[k].complete_records);
      assert_int_equal(t.damage.records, before[k].complete_records);
      assert_memory_equal(&t.tot, &before[k].tot, sizeof t.tot);
      plr_trace_free(&t);
      tried++;
    }
  }
  /* The same changes without checksums: how many leave a report that looks
   * complete and clean (no partial, no malformed record)? */
  size_t unnoticed = 0, plain_tried = 0;
  unsigned char *q = malloc(plain.len);
  assert_non_null(q);
  for (size_t at = sizeof(pagelock_file_header); at < plain.len; at++)
    for (int v = 0; v < 3; v++) {
      memcpy(q, plain.p, plain.len);
      q[at] ^= how[v];
      plr_trace t;
      plain_tried++;
      if (load_mem(&t, q, plain.len, msg, sizeof msg) != 0) continue;
      if (!plr_trace_partial(&t) && !t.malformed_records) unnoticed++;
      plr_trace_free(&t);
    }
  printf(
      "single-byte changes: %zu of %zu unnoticed without CHECK records "
      "(%.0f%%), 0 of %zu with them\n",
      unnoticed, plain_tried, 100.0 * (double)unnoticed / (double)plain_tried, tried);
  assert_true(unnoticed > plain_tried / 4);
  free(q);
  free(m);
  for (size_t k = 0; k < nb; k++) plr_trace_free(&before[k]);
  tb_free(&plain);
  tb_free(&ck);
}

/* A trace cut anywhere (a killed writer, a full disk) is a cut, never
 * damage: the whole blocks and the whole records of the unclosed tail are
 * reported, exactly as for a trace without checksums. */
static void test_checksum_cut_anywhere_is_not_damage(void **state) {
  (void)state;
  tb plain = {0}, ck = {0};
  build_reference(&plain, 1);
  tb_checksum(&plain, 3, &ck, NULL, NULL);
  char msg[1024];
  for (size_t len = sizeof(pagelock_file_header); len < ck.len; len++) {
    plr_trace t;
    assert_int_equal(load_mem(&t, ck.p, len, msg, sizeof msg), 0);
    size_t whole = 0, copies = 0;
    while (whole < ck.nrec) {
      size_t end = whole + 1 < ck.nrec ? ck.offsets[whole + 1] : ck.len;
      if (end > len) break;
      const pagelock_rec_hdr *h = (const pagelock_rec_hdr *)(ck.p + ck.offsets[whole]);
      copies += h->type == PAGELOCK_REC_COPY;
      whole++;
    }
    if (t.stop != PLR_STOP_EOF && t.stop != PLR_STOP_TRUNCATED && t.stop != PLR_STOP_END) {
      fprintf(stderr, "cut at %zu: stop %d\n", len, t.stop);
      fail();
    }
    assert_int_equal(t.tot.all.count + t.tot.graph_nodes, copies);
    if (t.stop != PLR_STOP_END) assert_int_equal(t.complete_records, whole);
    plr_trace_free(&t);
  }
  tb_free(&plain);
  tb_free(&ck);
}

/* The other kinds of damage, each with its message. */
static void test_checksum_damage_kinds(void **state) {
  (void)state;
  char msg[1024], w[1024];
  plr_trace t;
  /* A CHECK whose start is not where the previous block ended: the
   * checksum itself is right. */
  tb b = {0};
  tb_header(&b, 1, PAGELOCK_FILE_CHECKSUMS);
  uint64_t start = b.len;
  tb_process(&b, "/bin/x", "h", 0, -1);
  tb_check(&b, &start);
  uint64_t second = start;
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 100, 10, 0, 0x1234, 0);
  start -= 8;
  pagelock_rec_check c;
  memset(&c, 0, sizeof c);
  c.start = start;
  c.crc32c = pagelock_crc32c(0, b.p + second, b.len - second);
  tb_rec(&b, PAGELOCK_REC_CHECK, &c, sizeof c, NULL, NULL);
  assert_int_equal(load_mem(&t, b.p, b.len, msg, sizeof msg), 0);
  assert_int_equal(t.stop, PLR_STOP_DAMAGED);
  assert_int_equal(t.damage.kind, PLR_DAMAGE_START);
  plr_trace_partial_message(&t, w, sizeof w);
  snprintf(msg, sizeof msg,
           "'mem.trace' is corrupt from byte %llu (the CHECK record at byte "
           "%llu says its block starts at byte %llu); the report covers the "
           "2 records before it",
           (unsigned long long)second, (unsigned long long)(second + sizeof(pagelock_rec_copy)),
           (unsigned long long)(second - 8));
  assert_string_equal(w, msg);
  assert_int_equal(t.tot.all.count, 0);
  assert_string_equal(t.exe, "/bin/x");
  plr_trace_free(&t);
  tb_free(&b);

  /* A checksum mismatch: the wording the CLI prints. */
  tb_header(&b, 1, PAGELOCK_FILE_CHECKSUMS);
  start = b.len;
  tb_process(&b, "/bin/x", "h", 0, -1);
  tb_check(&b, &start);
  second = start;
  copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 100, 10, 0, 0x1234, 0);
  tb_check(&b, &start);
  b.p[second + 30] ^= 4;
  assert_int_equal(load_mem(&t, b.p, b.len, msg, sizeof msg), 0);
  plr_trace_partial_message(&t, w, sizeof w);
  snprintf(msg, sizeof msg,
           "'mem.trace' is corrupt from byte %llu (checksum mismatch in the "
           "block of bytes %llu..%llu); the report covers the 2 records "
           "before it",
           (unsigned long long)second, (unsigned long long)second,
           (unsigned long long)(second + sizeof(pagelock_rec_copy) - 1));
  assert_string_equal(w, msg);
  plr_trace_free(&t);
  tb_free(&b);

  /* No CHECK within PLR_MAX_BLOCK: five 1 MiB notes. */
  tb_header(&b, 1, PAGELOCK_FILE_CHECKSUMS);
  start = b.len;
  char *big = malloc(1u << 20);
  assert_non_null(big);
  memset(big, 'n', (1u << 20) - 64);
  big[(1u << 20) - 64] = 0;
  for (int i = 0; i < 5; i++) tb_note(&b, 0, big);
  tb_check(&b, &start);
  free(big);
  assert_int_equal(load_mem(&t, b.p, b.len, msg, sizeof msg), 0);
  assert_int_equal(t.stop, PLR_STOP_DAMAGED);
  assert_int_equal(t.damage.kind, PLR_DAMAGE_LONG);
  plr_trace_partial_message(&t, w, sizeof w);
  assert_string_equal(w,
                      "'mem.trace' is corrupt from byte 64 (no CHECK record "
                      "closes the block within 4 MiB); the report covers "
                      "the 0 records before it");
  plr_trace_free(&t);
  tb_free(&b);

  /* A CHECK record in a version-3 trace whose header does not say it has
   * checksums: the flag was lost.  In version 2, type 15 was nobody's: an
   * unknown record, skipped. */
  for (uint32_t v = 2; v <= 3; v++) {
    tb_header_v(&b, v, 64, 1, 0);
    start = b.len;
    tb_process(&b, "/bin/x", "h", 0, -1);
    tb_check(&b, &start);
    copy(&b, PAGELOCK_DIR_H2D, PAGELOCK_MEM_PAGEABLE, 0, 100, 10, 0, 0x1234, 0);
    tb_end(&b, 5);
    assert_int_equal(load_mem(&t, b.p, b.len, msg, sizeof msg), 0);
    if (v == 2) {
      assert_int_equal(t.stop, PLR_STOP_END);
      assert_int_equal(t.unknown_records, 1);
      assert_int_equal(t.tot.all.count, 1);
    } else {
      assert_int_equal(t.stop, PLR_STOP_DAMAGED);
      plr_trace_partial_message(&t, w, sizeof w);
      assert_string_equal(w,
                          "'mem.trace' is corrupt: a CHECK record at byte "
                          "120, but its header's flags (0x0) say it has no "
                          "checksums; the report covers the 1 records "
                          "before it");
      assert_int_equal(t.tot.all.count, 0);
    }
    plr_trace_free(&t);
    tb_free(&b);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_checksummed_reads_the_same),
      cmocka_unit_test(test_checksum_catches_every_byte),
      cmocka_unit_test(test_checksum_cut_anywhere_is_not_damage),
      cmocka_unit_test(test_checksum_damage_kinds),
  };
  return cmocka_run_group_tests_name("reader_checksum", tests, NULL, NULL);
}
