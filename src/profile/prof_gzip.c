/* The heap profile writer's gzip compressor (profile.h: prof_gzip_write): CRC-32 and
 * DEFLATE, on os_map memory, written with write(2); no malloc, no zlib. */
#include "profile/profile.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* ---- writing a file descriptor ------------------------------------------------- */

static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (w == 0) return -EIO;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* ---- gzip ------------------------------------------------------------------------ */

/* RFC 1952 around RFC 1951: a 10-byte header, DEFLATE blocks, and the CRC-32 and length
 * of the data. Matching is greedy, over the whole input (already in memory), with hash
 * chains limited to GZ_MAX_CHAIN candidates. Each block of about GZ_BLOCK input bytes is
 * coded with the fixed Huffman codes, or stored as it is when that is shorter (random
 * addresses barely compress): the output is never more than a few bytes per block longer
 * than the input. A profile's repeated ids, tags and file names compress several times. */

#define GZ_WINDOW 32768u
#define GZ_HASH_BITS 15
#define GZ_MIN_MATCH 3
#define GZ_MAX_MATCH 258
#define GZ_MAX_CHAIN 64
#define GZ_BLOCK 32768u                /* input bytes a block starts with; a last match may run past */
#define GZ_OUT_CAP ((size_t)64 * 1024) /* a multiple of every page size */
/* A block's symbols before they are coded: a literal byte, or a match of
 * length << GZ_LEN_SHIFT | (distance - 1), flagged by GZ_MATCH. */
#define GZ_MATCH 0x80000000u
#define GZ_LEN_SHIFT 16
_Static_assert(GZ_BLOCK + GZ_MAX_MATCH <= 65535, "a stored block holds at most 65535 bytes");

typedef struct gz {
  int fd;
  int err;      /* negative errno, sticky */
  uint8_t *out; /* GZ_OUT_CAP bytes, written to fd when full */
  size_t out_len;
  uint64_t bits; /* pending bits, LSB first; fewer than 8 between calls */
  unsigned nbits;
  size_t *head;        /* hash -> last position + 1 with it (0: none) */
  size_t *prev;        /* position % GZ_WINDOW -> previous position + 1 with its hash */
  uint32_t *syms;      /* GZ_BLOCK: the current block's symbols */
  uint32_t *crc_table; /* 256 entries */
} gz_t;

static void gz_flush(gz_t *g) {
  if (g->err == 0 && g->out_len) g->err = write_all(g->fd, g->out, g->out_len);
  g->out_len = 0;
}

static void gz_byte(gz_t *g, uint8_t b) {
  if (g->out_len == GZ_OUT_CAP) gz_flush(g);
  g->out[g->out_len++] = b;
}

static void gz_le32(gz_t *g, uint32_t v) {
  for (int i = 0; i < 4; i++) gz_byte(g, (uint8_t)(v >> (8 * i)));
}

/* n <= 32 bits of v, least significant first (DEFLATE's order for everything but the
 * Huffman codes, which gz_code reverses). */
static void gz_bits(gz_t *g, uint32_t v, unsigned n) {
  g->bits |= (uint64_t)v << g->nbits;
  g->nbits += n;
  while (g->nbits >= 8) {
    gz_byte(g, (uint8_t)g->bits);
    g->bits >>= 8;
    g->nbits -= 8;
  }
}

static void gz_align(gz_t *g) {
  if (g->nbits) gz_bits(g, 0, 8 - g->nbits);
}

/* A Huffman code of n bits, most significant bit first. */
static void gz_code(gz_t *g, uint32_t code, unsigned n) {
  uint32_t r = 0;
  for (unsigned i = 0; i < n; i++) r |= ((code >> i) & 1u) << (n - 1 - i);
  gz_bits(g, r, n);
}

/* A literal/length symbol in the fixed code (RFC 1951, 3.2.6). */
static unsigned gz_symbol_bits(unsigned sym) { return sym < 144 ? 8 : sym < 256 ? 9 : sym < 280 ? 7 : 8; }

static void gz_symbol(gz_t *g, unsigned sym) {
  if (sym < 144) gz_code(g, 0x30 + sym, 8);
  else if (sym < 256) gz_code(g, 0x190 + sym - 144, 9);
  else if (sym < 280) gz_code(g, sym - 256, 7);
  else gz_code(g, 0xc0 + sym - 280, 8);
}

/* A match's length 3..258 and distance 1..32768 as codes and extra bits. The codes'
 * base values double every 4 (lengths) or 2 (distances) codes, so a code follows from
 * the position of the top bit. */
typedef struct gz_match_code {
  unsigned len_sym, len_extra, len_extra_bits;
  unsigned dist_code, dist_extra, dist_extra_bits;
} gz_match_code_t;

static gz_match_code_t gz_match_code(unsigned len, unsigned dist) {
  gz_match_code_t c = {0};
  unsigned x = len - 3;
  if (len == 258) {
    c.len_sym = 285;
  } else if (x < 8) {
    c.len_sym = 257 + x;
  } else {
    unsigned top = 31u - (unsigned)__builtin_clz(x); /* 3..7 */
    c.len_extra_bits = top - 2;
    c.len_sym = 257 + 4 * (top - 1) + ((x >> c.len_extra_bits) & 3);
    c.len_extra = x & ((1u << c.len_extra_bits) - 1);
  }
  unsigned d = dist - 1;
  if (d < 4) {
    c.dist_code = d;
  } else {
    unsigned top = 31u - (unsigned)__builtin_clz(d); /* 2..14 */
    c.dist_extra_bits = top - 1;
    c.dist_code = 2 * top + ((d >> c.dist_extra_bits) & 1);
    c.dist_extra = d & ((1u << c.dist_extra_bits) - 1);
  }
  return c;
}

static uint32_t gz_hash(const uint8_t *p) {
  uint32_t v = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
  return (v * 2654435761u) >> (32 - GZ_HASH_BITS);
}

static void gz_insert(gz_t *g, const uint8_t *data, size_t pos) {
  uint32_t h = gz_hash(data + pos);
  g->prev[pos % GZ_WINDOW] = g->head[h];
  g->head[h] = pos + 1;
}

/* The longest earlier match for data[pos..], 0 if shorter than GZ_MIN_MATCH. */
static unsigned gz_longest(const gz_t *g, const uint8_t *data, size_t len, size_t pos, unsigned *dist) {
  size_t limit = len - pos < GZ_MAX_MATCH ? len - pos : GZ_MAX_MATCH;
  unsigned best = 0;
  size_t cand = g->head[gz_hash(data + pos)];
  for (int chain = GZ_MAX_CHAIN; cand != 0 && chain > 0; chain--) {
    size_t c = cand - 1;
    if (pos - c > GZ_WINDOW) break;
    if (data[c + best] == data[pos + best]) {
      size_t l = 0;
      while (l < limit && data[c + l] == data[pos + l]) l++;
      if (l > best) {
        best = (unsigned)l;
        *dist = (unsigned)(pos - c);
        if (l == limit) break;
      }
    }
    cand = g->prev[c % GZ_WINDOW]; /* older, since c is inside the window */
  }
  return best >= GZ_MIN_MATCH ? best : 0;
}

/* Symbols for data[pos..] until at least GZ_BLOCK bytes are covered or the data ends:
 * the count in *nsyms, the bits they take in the fixed code in *bits; returns the end. */
static size_t gz_scan_block(gz_t *g, const uint8_t *data, size_t len, size_t pos, size_t *nsyms,
                            uint64_t *bits) {
  size_t end = len - pos < GZ_BLOCK ? len : pos + GZ_BLOCK;
  size_t n = 0;
  uint64_t b = 0;
  while (pos < end) {
    unsigned dist = 0, match = 0;
    if (len - pos >= GZ_MIN_MATCH) {
      match = gz_longest(g, data, len, pos, &dist);
      gz_insert(g, data, pos);
    }
    if (match) {
      gz_match_code_t c = gz_match_code(match, dist);
      b += gz_symbol_bits(c.len_sym) + c.len_extra_bits + 5 + c.dist_extra_bits;
      g->syms[n++] = GZ_MATCH | (uint32_t)match << GZ_LEN_SHIFT | (dist - 1);
      for (size_t i = pos + 1; i < pos + match && len - i >= GZ_MIN_MATCH; i++) gz_insert(g, data, i);
      pos += match;
    } else {
      b += gz_symbol_bits(data[pos]);
      g->syms[n++] = data[pos];
      pos++;
    }
  }
  *nsyms = n;
  *bits = b;
  return pos;
}

static void gz_fixed_block(gz_t *g, size_t nsyms, bool final) {
  gz_bits(g, final, 1);
  gz_bits(g, 1, 2); /* BTYPE 01: fixed Huffman codes */
  for (size_t i = 0; i < nsyms; i++) {
    uint32_t s = g->syms[i];
    if (!(s & GZ_MATCH)) {
      gz_symbol(g, s);
      continue;
    }
    gz_match_code_t c = gz_match_code((s & ~GZ_MATCH) >> GZ_LEN_SHIFT, (s & 0xffff) + 1);
    gz_symbol(g, c.len_sym);
    gz_bits(g, c.len_extra, c.len_extra_bits);
    gz_code(g, c.dist_code, 5);
    gz_bits(g, c.dist_extra, c.dist_extra_bits);
  }
  gz_symbol(g, 256); /* end of block */
}

static void gz_stored_block(gz_t *g, const uint8_t *p, size_t n, bool final) {
  gz_bits(g, final, 1);
  gz_bits(g, 0, 2); /* BTYPE 00: stored */
  gz_align(g);
  gz_bits(g, (uint32_t)n, 16);
  gz_bits(g, (uint32_t)n ^ 0xffffu, 16);
  for (size_t i = 0; i < n; i++) gz_byte(g, p[i]);
}

static void gz_deflate(gz_t *g, const uint8_t *data, size_t len) {
  size_t pos = 0;
  do {
    size_t nsyms;
    uint64_t bits;
    size_t end = gz_scan_block(g, data, len, pos, &nsyms, &bits);
    bool final = end == len;
    uint64_t fixed_bits = 3 + bits + 7;
    uint64_t stored_bits = 3 + 7 + 32 + 8 * (uint64_t)(end - pos);
    if (fixed_bits <= stored_bits) gz_fixed_block(g, nsyms, final);
    else gz_stored_block(g, data + pos, end - pos, final);
    pos = end;
  } while (pos < len && g->err == 0);
  gz_align(g);
}

static uint32_t gz_crc32(const gz_t *g, const uint8_t *p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = g->crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

static int gzip_to_fd(int fd, const uint8_t *data, size_t len) {
  gz_t g = {.fd = fd};
  size_t hash_bytes = ((size_t)1 << GZ_HASH_BITS) * sizeof(size_t);
  size_t prev_bytes = GZ_WINDOW * sizeof(size_t);
  size_t syms_bytes = GZ_BLOCK * sizeof(uint32_t);
  size_t crc_bytes = 256 * sizeof(uint32_t);
  size_t total = GZ_OUT_CAP + hash_bytes + prev_bytes + syms_bytes + crc_bytes;
  uint8_t *mem = os_map(total); /* reads as zero: empty hash chains */
  if (mem == NULL) return -ENOMEM;
  g.out = mem;
  g.head = (size_t *)(mem + GZ_OUT_CAP);
  g.prev = (size_t *)(mem + GZ_OUT_CAP + hash_bytes);
  g.syms = (uint32_t *)(mem + GZ_OUT_CAP + hash_bytes + prev_bytes);
  g.crc_table = (uint32_t *)(mem + GZ_OUT_CAP + hash_bytes + prev_bytes + syms_bytes);
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    g.crc_table[i] = c;
  }
  /* ID1 ID2, CM = 8 (deflate), FLG = 0, MTIME = 0, XFL = 0, OS = 3 (Unix) */
  static const uint8_t header[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  for (size_t i = 0; i < sizeof header; i++) gz_byte(&g, header[i]);
  gz_deflate(&g, data, len);
  gz_le32(&g, gz_crc32(&g, data, len));
  gz_le32(&g, (uint32_t)len); /* ISIZE: the length mod 2^32 */
  gz_flush(&g);
  os_unmap(mem, total);
  return g.err;
}

int prof_gzip_write(int fd, const void *data, size_t len) {
  int saved = errno;
  int rc = (len && data == NULL) ? -EINVAL : gzip_to_fd(fd, data, len);
  errno = saved;
  return rc;
}
