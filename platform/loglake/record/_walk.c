/* The record walk of loglake/record/walk.py, and the record fields and byte ranges of
 * loglake/record/columns.py, in C.
 *
 * The walk: where each record of a Kafka v2 records section starts. Each record begins with
 * its length as a zig-zag varint, so a record's start depends on the previous record's
 * length: a sequential loop, a few nanoseconds a record here against a fraction of a
 * microsecond in Python.
 *
 * The columns: in the same single pass over joined records sections, every record's fields
 * up to its headers (timestamp and offset deltas, key and value positions and lengths, header
 * count and position), which numpy otherwise reads with several passes over the whole buffer.
 *
 * The byte ranges: keys and values copied out of the joined sections one after the other
 * into an Arrow binary array's buffers (Arrow's take over the ranges costs ~3 times more).
 *
 * Built as a plain shared library (scripts/build_native.sh) and called with ctypes; when it
 * is absent, walk.py walks in Python and columns.py reads the fields with numpy. Both accept
 * exactly the same sections and refuse corrupt ones with the same error. No function reads a
 * byte outside the data it is given, whatever the bytes. */

#include <stdint.h>
#include <string.h>

/* Raised whenever the signature or the meaning of the results changes, so that a library
 * left from an older source is not used (walk.py checks it). */
#define LOGLAKE_WALK_ABI 2

enum {
    WALK_OK = 0,
    WALK_NEGATIVE_LENGTH = -1,
    WALK_BAD_VARINT = -2,     /* cut by the end of the section, or longer than 10 bytes */
    WALK_PAST_END = -3,       /* a record's length runs past the end of the section */
    WALK_COUNT_MISMATCH = -4, /* more or fewer records than `count` */
};

/* loglake_record_columns' errors; columns.py raises the same errors as its numpy path. */
enum {
    COLUMNS_OK = 0,
    COLUMNS_NOT_RECORDS = -1,   /* a section's walk failed (any WALK_* error) */
    COLUMNS_LONG_VARINT = -2,   /* a field's varint is longer than 10 bytes */
    COLUMNS_PAST_RECORD = -3,   /* the key or the value runs past the record's end */
    COLUMNS_OUT_OF_DATA = -4,   /* a field's varint runs past the data (no padding after it) */
};

int64_t loglake_walk_abi(void) { return LOGLAKE_WALK_ABI; }

/* The length varint of the record at data[at], inside data[at:end]: WALK_OK with the length
 * and the position after the varint, or a negative WALK_* code. */
static inline int64_t record_length(const uint8_t *data, int64_t at, int64_t end, uint64_t *length, int64_t *after) {
    uint8_t b = data[at];
    if (b & 1) { /* zig-zag: the sign is the lowest bit of the first byte */
        return WALK_NEGATIVE_LENGTH;
    }
    uint64_t value = b & 0x7F;
    int64_t pos = at + 1;
    if (b >= 0x80) {
        /* As Python's decode: up to 10 bytes. The 10th byte lands at bit 63; a value
         * reaching past 64 bits is a length past any section (Python's int holds it). */
        int shift = 7;
        for (;;) {
            if (pos >= end) {
                return WALK_BAD_VARINT;
            }
            b = data[pos++];
            if (shift == 63) {
                if (b >= 0x80) {
                    return WALK_BAD_VARINT;
                }
                if (b & 0x7E) {
                    return WALK_PAST_END;
                }
            }
            value |= (uint64_t)(b & 0x7F) << shift;
            if (b < 0x80) {
                break;
            }
            shift += 7;
        }
    }
    *length = value >> 1;
    if (*length > (uint64_t)(end - pos)) {
        return WALK_PAST_END;
    }
    *after = pos;
    return WALK_OK;
}

/* Writes the start of each of the `count` records of data[start:end] to `starts` (which holds
 * `count` entries; NULL: only check) and returns WALK_OK, or a negative WALK_* code. Reads no
 * byte outside data[start:end]; the caller guarantees 0 <= start <= end <= the data's size. */
int64_t loglake_walk(const uint8_t *data, int64_t start, int64_t end, int64_t count, int64_t *starts) {
    int64_t at = start;
    int64_t found = 0;
    if (count < 0) {
        return WALK_COUNT_MISMATCH;
    }
    while (at < end) {
        if (found == count) {
            return WALK_COUNT_MISMATCH;
        }
        uint64_t length;
        int64_t pos;
        int64_t code = record_length(data, at, end, &length, &pos);
        if (code != WALK_OK) {
            return code;
        }
        if (starts) {
            starts[found] = at;
        }
        found++;
        at = pos + (int64_t)length;
    }
    return found == count ? WALK_OK : WALK_COUNT_MISMATCH;
}

/* A field's zig-zag varint at data[*pos], as columns.py's read_varints reads it: up to 10
 * bytes, keeping the low 64 bits. 0, COLUMNS_LONG_VARINT, or COLUMNS_OUT_OF_DATA when it
 * runs past data[size - 1]; on 0, *pos moves past it. */
static inline int64_t read_field(const uint8_t *data, int64_t size, int64_t *pos, int64_t *out) {
    int64_t p = *pos;
    if (p >= size) {
        return COLUMNS_OUT_OF_DATA;
    }
    uint64_t value = data[p++];
    if (value >= 0x80) {
        value &= 0x7F;
        int shift = 7;
        for (;;) {
            if (shift > 63) {
                return COLUMNS_LONG_VARINT;
            }
            if (p >= size) {
                return COLUMNS_OUT_OF_DATA;
            }
            uint8_t b = data[p++];
            value |= (uint64_t)(b & 0x7F) << shift; /* bits past 64 are dropped, as numpy does */
            if (b < 0x80) {
                break;
            }
            shift += 7;
        }
    }
    *out = (int64_t)((value >> 1) ^ (0 - (value & 1)));
    *pos = p;
    return 0;
}

/* The numpy path reads each field of every record before the next field of any record, and
 * raises at the first field some record fails: of two failing records, the error of the one
 * failing at the earlier field is the one raised. A record's failure is ranked by its field
 * (FIELD_* below), and within a varint field running past the data (numpy's take fails)
 * comes before a varint too long (numpy raises after reading every byte of the field). */
enum { FIELD_TIMESTAMP = 1, FIELD_OFFSET, FIELD_KEY_LENGTH, FIELD_KEY, FIELD_VALUE_LENGTH, FIELD_VALUE, FIELD_HEADERS };

static inline int64_t failed(int64_t field, int64_t code, int64_t *failure) {
    *failure = code;
    return 2 * field + (code == COLUMNS_LONG_VARINT);
}

/* One record's fields after its length varint (at `pos`, the record ending at `end`): 0, or
 * the rank of its first failure, its COLUMNS_* code in *failure. */
static inline int64_t record_fields(
    const uint8_t *data, int64_t size, int64_t pos, int64_t end, int64_t **out, int64_t i, int64_t *failure
) {
    int64_t c, length;
    pos += 1; /* attributes: unused in magic 2 */
    if ((c = read_field(data, size, &pos, &out[2][i]))) {
        return failed(FIELD_TIMESTAMP, c, failure);
    }
    if ((c = read_field(data, size, &pos, &out[3][i]))) {
        return failed(FIELD_OFFSET, c, failure);
    }
    if ((c = read_field(data, size, &pos, &length))) {
        return failed(FIELD_KEY_LENGTH, c, failure);
    }
    out[4][i] = pos;
    out[5][i] = length;
    /* A null key (any negative length) takes no bytes. Compared as lengths, not as positions,
     * so that a huge length cannot overflow; the key's length varint may itself have run past. */
    int64_t taken = length > 0 ? length : 0;
    if (taken > end - pos) {
        return failed(FIELD_KEY, COLUMNS_PAST_RECORD, failure);
    }
    pos += taken;
    if ((c = read_field(data, size, &pos, &length))) {
        return failed(FIELD_VALUE_LENGTH, c, failure);
    }
    out[6][i] = pos;
    out[7][i] = length;
    taken = length > 0 ? length : 0;
    if (taken > end - pos) {
        return failed(FIELD_VALUE, COLUMNS_PAST_RECORD, failure);
    }
    pos += taken;
    if ((c = read_field(data, size, &pos, &out[8][i]))) {
        return failed(FIELD_HEADERS, c, failure);
    }
    out[9][i] = pos;
    return 0;
}

/* Walks the `sections` records sections data[section_ends[s - 1] (0 for the first) :
 * section_ends[s]], section s holding `counts[s]` records, and writes for the i-th record of
 * them all out[f][i] = field f, out being `columns` as 10 arrays of the counts' sum entries:
 * start, end, timestamp delta, offset delta, key position, key length, value position, value
 * length, header count, header position. Returns COLUMNS_OK or a negative COLUMNS_* code.
 *
 * Reads no byte outside data[0:size]: a record's fields may be read past its end (the numpy
 * path reads them so too, and then checks), never past the data. The caller guarantees that
 * every section lies in data[0:size] and that `columns` holds the counts' sum entries. */
int64_t loglake_record_columns(
    const uint8_t *data, int64_t size, const int64_t *section_ends, const int64_t *counts, int64_t sections,
    int64_t *columns
) {
    int64_t total = 0;
    for (int64_t s = 0; s < sections; s++) {
        total += counts[s];
    }
    int64_t *out[10];
    for (int f = 0; f < 10; f++) {
        out[f] = columns + f * total;
    }
    int64_t worst = INT64_MAX; /* the rank of the failure numpy would raise, so far */
    int64_t worst_code = COLUMNS_OK;
    int64_t i = 0;
    int64_t at = 0;
    for (int64_t s = 0; s < sections; s++) {
        int64_t end = section_ends[s];
        int64_t last = i + counts[s];
        while (at < end) {
            if (i == last) {
                return COLUMNS_NOT_RECORDS;
            }
            uint64_t length;
            int64_t pos;
            if (record_length(data, at, end, &length, &pos) != WALK_OK) {
                return COLUMNS_NOT_RECORDS; /* numpy walks every section before any field */
            }
            int64_t record_end = pos + (int64_t)length;
            out[0][i] = at;
            out[1][i] = record_end;
            int64_t code;
            int64_t ranked = record_fields(data, size, pos, record_end, out, i, &code);
            if (ranked && ranked < worst) {
                worst = ranked;
                worst_code = code;
            }
            i++;
            at = record_end;
        }
        if (i != last) {
            return COLUMNS_NOT_RECORDS;
        }
    }
    return worst_code;
}

/* Copies the byte ranges data[pos[i] : pos[i] + len[i]] (none where len[i] < 0: a null) one
 * after the other into `out`, and writes where range i starts there to offsets[i] and their
 * total to offsets[n]: an Arrow binary array's buffers. Returns 0, or -1 as soon as a range
 * lies outside data[0:size] or past out[0:capacity] (nothing is read or written outside
 * them; what was written is garbage then). `capacity` is at most INT32_MAX. */
int64_t loglake_gather(
    const uint8_t *data, int64_t size, const int64_t *pos, const int64_t *len, int64_t n, int32_t *offsets,
    uint8_t *out, int64_t capacity
) {
    int64_t o = 0;
    for (int64_t i = 0; i < n; i++) {
        offsets[i] = (int32_t)o;
        int64_t p = pos[i], l = len[i];
        if (l <= 0) {
            continue;
        }
        if (p < 0 || p > size || l > size - p || l > capacity - o) {
            return -1;
        }
        memcpy(out + o, data + p, (size_t)l);
        o += l;
    }
    offsets[n] = (int32_t)o;
    return 0;
}
