/* Record encoding for the HTTP produce path in C (loglake/record/native_encode.py loads it
 * with ctypes): Kafka's murmur2 of many keys, a REST produce body's base64 keys and values
 * decoded straight into magic-2 records grouped by partition, and the offsets list of the
 * response. Each is a per-record loop that costs a microsecond or more a record in Python
 * and a few nanoseconds here.
 *
 * Built as a plain shared library by scripts/build_native.sh; when it is absent, Python does
 * the same work (loglake.partitioner, loglake.record.batch, ingest_gateway.http). The base64
 * decoder accepts only canonical base64 (what binascii's strict mode accepts, with a length
 * a multiple of 4) and answers "not mine" for anything else: the caller then takes the
 * Python path, which accepts or refuses with its own messages. */

#include <stdint.h>
#include <string.h>

/* Raised whenever a signature or the meaning of a result changes, so that a library left
 * from an older source is not used (native_encode.py checks it). */
#define LOGLAKE_ENCODE_ABI 1

enum {
    ENCODE_OK = 0,
    ENCODE_NOT_BASE64 = -1,  /* a key or value is not canonical base64 */
    ENCODE_NO_ROOM = -2,     /* the output buffer is too small */
    ENCODE_BAD_ARGUMENT = -3 /* a partition count or forced partition out of range */
};

int64_t loglake_encode_abi(void) { return LOGLAKE_ENCODE_ABI; }

#define M 0x5BD1E995u
#define SEED 0x9747B28Cu

/* Kafka's Utils.murmur2 (the Java client's default partitioner), as an unsigned value. */
static uint32_t murmur2(const uint8_t *data, int64_t length) {
    uint32_t h = SEED ^ (uint32_t)length;
    int64_t body = length & ~(int64_t)3;
    for (int64_t i = 0; i < body; i += 4) {
        uint32_t k = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 | (uint32_t)data[i + 2] << 16 |
                     (uint32_t)data[i + 3] << 24;
        k *= M;
        k ^= k >> 24;
        k *= M;
        h = (h * M) ^ k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[body + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[body + 1] << 8;
        /* fall through */
    case 1:
        h ^= data[body];
        h *= M;
    }
    h ^= h >> 13;
    h *= M;
    h ^= h >> 15;
    return h;
}

/* murmur2 of the `n` keys laid end to end in `data`, the i-th `lengths[i]` bytes long. */
void loglake_murmur2_many(const uint8_t *data, const int64_t *lengths, int64_t n, uint32_t *out) {
    for (int64_t i = 0; i < n; i++) {
        out[i] = murmur2(data, lengths[i]);
        data += lengths[i];
    }
}

/* 1 + the value of each character of the base64 alphabet; 0 for any other byte ('='
 * included), so that `B64[c] - 1` is above 63 for a character that is not base64. */
static const uint8_t B64[256] = {
    ['A'] = 1, ['B'] = 2, ['C'] = 3, ['D'] = 4, ['E'] = 5, ['F'] = 6, ['G'] = 7, ['H'] = 8,
    ['I'] = 9, ['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14, ['O'] = 15, ['P'] = 16,
    ['Q'] = 17, ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21, ['V'] = 22, ['W'] = 23, ['X'] = 24,
    ['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28, ['c'] = 29, ['d'] = 30, ['e'] = 31, ['f'] = 32,
    ['g'] = 33, ['h'] = 34, ['i'] = 35, ['j'] = 36, ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40,
    ['o'] = 41, ['p'] = 42, ['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48,
    ['w'] = 49, ['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56,
    ['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['+'] = 63, ['/'] = 64,
};

/* The '=' at the end of base64 text of a length that is a multiple of 4 (0, 1 or 2). */
static int64_t b64_padding(const uint8_t *s, int64_t n) {
    return n == 0 || s[n - 1] != '=' ? 0 : s[n - 2] == '=' ? 2 : 1;
}

/* Decodes base64 text of a length that is a multiple of 4 whose padding b64_padding found;
 * leftover bits of the last quantum are dropped, as binascii drops them. Returns 0, or
 * nonzero if a character before the padding is not in the alphabet. */
static int b64_decode(const uint8_t *s, int64_t n, int64_t pad, uint8_t *out) {
    uint32_t bad = 0;
    int64_t full = pad ? n - 4 : n;
    for (int64_t i = 0; i < full; i += 4) {
        uint32_t a = B64[s[i]] - 1u, b = B64[s[i + 1]] - 1u, c = B64[s[i + 2]] - 1u, d = B64[s[i + 3]] - 1u;
        bad |= a | b | c | d;
        uint32_t v = a << 18 | b << 12 | c << 6 | d;
        *out++ = (uint8_t)(v >> 16);
        *out++ = (uint8_t)(v >> 8);
        *out++ = (uint8_t)v;
    }
    if (pad) {
        const uint8_t *q = s + full;
        uint32_t a = B64[q[0]] - 1u, b = B64[q[1]] - 1u;
        bad |= a | b;
        *out++ = (uint8_t)((a << 2) | (b >> 4));
        if (pad == 1) {
            uint32_t c = B64[q[2]] - 1u;
            bad |= c;
            *out++ = (uint8_t)((b << 4) | (c >> 2));
        }
    }
    return bad > 63; /* a character outside the alphabet wrapped round to 0xFFFFFFFF */
}

/* The next of `n` comma-separated tokens of text[*at:end] (the last runs to `end`): its
 * length, or -1 if the text has fewer tokens. Moves *at past it and its comma. */
static int64_t next_token(const uint8_t *text, int64_t *at, int64_t end, int last) {
    int64_t start = *at;
    if (last) {
        *at = end;
        return end - start;
    }
    const uint8_t *comma = memchr(text + start, ',', (size_t)(end - start));
    if (comma == NULL) {
        return -1;
    }
    *at = comma - text + 1;
    return comma - text - start;
}

/* The decoded size of base64 text whose length is a multiple of 4, from its padding; -1
 * for any other length. The characters are checked when decoded. */
static int64_t b64_decoded_size(const uint8_t *s, int64_t n) {
    return n < 0 || n & 3 ? -1 : n / 4 * 3 - b64_padding(s, n);
}

/* Size of the zig-zag varint of a non-negative value. */
static int varint_size(uint64_t n) {
    uint64_t z = n << 1;
    int size = 1;
    while (z > 0x7F) {
        z >>= 7;
        size++;
    }
    return size;
}

static uint8_t *put_varint(uint8_t *out, uint64_t n) {
    uint64_t z = n << 1;
    while (z > 0x7F) {
        *out++ = (uint8_t)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *out++ = (uint8_t)z;
    return out;
}

/* Record i's token of comma-separated text (see next_token), its start in *token. */
static int64_t token_at(const uint8_t *text, int64_t *at, int64_t end, int last, const uint8_t **token) {
    int64_t length = next_token(text, at, end, last);
    *token = length < 0 ? text : text + *at - length - !last;
    return length;
}

/* The `n` records whose base64 keys and values are the comma-separated tokens of
 * keys[0:keys_size] and values[0:values_size] (keys NULL: every key null), as magic-2
 * records (timestamp delta 0, no headers) grouped by partition: a key's partition is
 * murmur2's, as Kafka's default partitioner places it, or `forced_partition` when it is >= 0
 * (it must be, for null keys). A key or value holding a comma leaves the last token with
 * one: not base64, so the text is declined.
 *
 * Writes each partition's records section into `out` one after another in partition order:
 * partition p's section ends at section_ends[p] (so it starts at section_ends[p - 1], or 0)
 * and holds counts[p] records, offset deltas 0, 1, ... in request order. targets[i] is record
 * i's partition, index[i] its offset delta. Returns the bytes written or a negative ENCODE_*. */
int64_t loglake_encode_base64_records(const uint8_t *keys, int64_t keys_size, const uint8_t *values,
                                      int64_t values_size, int64_t n, int32_t num_partitions,
                                      int32_t forced_partition, uint8_t *out, int64_t capacity, int32_t *targets,
                                      int64_t *index, int64_t *section_ends, int64_t *counts) {
    if (num_partitions <= 0 || forced_partition >= num_partitions || n <= 0 || (!keys && forced_partition < 0)) {
        return ENCODE_BAD_ARGUMENT;
    }
    for (int32_t p = 0; p < num_partitions; p++) {
        counts[p] = 0;
        section_ends[p] = 0;
    }
    /* First pass: split the text, check the keys, place each record and size it
     * (section_ends holds each partition's bytes until the prefix sum). A key is decoded
     * into `out` to hash it; values are checked as they are decoded, in the second pass. */
    int64_t key_at = 0, value_at = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *k = NULL, *v;
        int64_t key_field = 1; /* a null key: its length, -1, in one byte */
        int32_t p = forced_partition;
        if (keys) {
            int64_t key_length = token_at(keys, &key_at, keys_size, i == n - 1, &k);
            int64_t key_size = b64_decoded_size(k, key_length);
            if (key_size < 0) {
                return ENCODE_NOT_BASE64;
            }
            if (key_size > capacity) {
                return ENCODE_NO_ROOM;
            }
            if (b64_decode(k, key_length, b64_padding(k, key_length), out)) {
                return ENCODE_NOT_BASE64;
            }
            if (p < 0) {
                p = (int32_t)((murmur2(out, key_size) & 0x7FFFFFFFu) % (uint32_t)num_partitions);
            }
            key_field = varint_size((uint64_t)key_size) + key_size;
        }
        int64_t value_length = token_at(values, &value_at, values_size, i == n - 1, &v);
        int64_t value_size = b64_decoded_size(v, value_length);
        if (value_size < 0) {
            return ENCODE_NOT_BASE64;
        }
        int64_t delta = counts[p]++;
        targets[i] = p;
        index[i] = delta;
        /* attributes, timestamp delta (0) and header count (0): one byte each. */
        int64_t body = 3 + varint_size((uint64_t)delta) + key_field + varint_size((uint64_t)value_size) + value_size;
        section_ends[p] += varint_size((uint64_t)body) + body;
    }
    int64_t total = 0;
    for (int32_t p = 0; p < num_partitions; p++) {
        total += section_ends[p];
        section_ends[p] = total;
    }
    if (total > capacity) {
        return ENCODE_NO_ROOM;
    }
    /* Second pass: write each record at its partition's cursor, kept in section_ends (from
     * the section's start, it ends at the section's end). The text was split, the keys
     * checked and every size found by the first pass. */
    for (int32_t p = num_partitions - 1; p >= 0; p--) {
        section_ends[p] = p ? section_ends[p - 1] : 0;
    }
    key_at = 0;
    value_at = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *k = NULL, *v;
        int64_t key_length = 0, key_pad = 0, key_size = -1, key_field = 1;
        if (keys) {
            key_length = token_at(keys, &key_at, keys_size, i == n - 1, &k);
            key_pad = b64_padding(k, key_length);
            key_size = key_length / 4 * 3 - key_pad;
            key_field = varint_size((uint64_t)key_size) + key_size;
        }
        int64_t value_length = token_at(values, &value_at, values_size, i == n - 1, &v);
        int64_t value_pad = b64_padding(v, value_length);
        int64_t value_size = value_length / 4 * 3 - value_pad;
        int64_t body = 3 + varint_size((uint64_t)index[i]) + key_field + varint_size((uint64_t)value_size) + value_size;
        uint8_t *w = out + section_ends[targets[i]];
        w = put_varint(w, (uint64_t)body);
        *w++ = 0; /* attributes: unused in magic 2 */
        *w++ = 0; /* timestamp delta */
        w = put_varint(w, (uint64_t)index[i]);
        if (keys) {
            w = put_varint(w, (uint64_t)key_size);
            b64_decode(k, key_length, key_pad, w);
            w += key_size;
        } else {
            *w++ = 1; /* the zig-zag varint of -1: a null key */
        }
        w = put_varint(w, (uint64_t)value_size);
        if (b64_decode(v, value_length, value_pad, w)) {
            return ENCODE_NOT_BASE64;
        }
        w += value_size;
        *w++ = 0; /* no headers */
        section_ends[targets[i]] = w - out;
    }
    return total;
}

static uint8_t *put_text(uint8_t *out, const char *text) {
    size_t n = strlen(text);
    memcpy(out, text, n);
    return out + n;
}

static uint8_t *put_int(uint8_t *out, int64_t value) {
    char digits[24];
    int n = 0;
    uint64_t u = value < 0 ? -(uint64_t)value : (uint64_t)value;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (value < 0) {
        *out++ = '-';
    }
    while (n) {
        *out++ = (uint8_t)digits[--n];
    }
    return out;
}

/* Bytes one record's entry of the offsets list can take: the text around two 20-digit ints. */
#define OFFSET_ENTRY_MAX 96

/* A REST produce response's body, as orjson renders it: for record i, partition targets[i]
 * and offset bases[targets[i]] + index[i]. `out` holds at least 128 + n * OFFSET_ENTRY_MAX
 * bytes; returns the bytes written, or ENCODE_BAD_ARGUMENT if a partition is not in
 * 0 .. base_count - 1. */
int64_t loglake_offsets_json(const int32_t *targets, const int64_t *index, const int64_t *bases, int64_t base_count,
                             int64_t n, uint8_t *out) {
    for (int64_t i = 0; i < n; i++) {
        if (targets[i] < 0 || targets[i] >= base_count) {
            return ENCODE_BAD_ARGUMENT;
        }
    }
    uint8_t *w = put_text(out, "{\"offsets\":[");
    for (int64_t i = 0; i < n; i++) {
        w = put_text(w, i ? ",{\"partition\":" : "{\"partition\":");
        w = put_int(w, targets[i]);
        w = put_text(w, ",\"offset\":");
        w = put_int(w, bases[targets[i]] + index[i]);
        w = put_text(w, ",\"error_code\":null,\"error\":null}");
    }
    w = put_text(w, "],\"key_schema_id\":null,\"value_schema_id\":null}");
    return w - out;
}
