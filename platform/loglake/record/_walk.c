/* The record walk of loglake/record/walk.py in C: where each record of a Kafka v2 records
 * section starts. Each record begins with its length as a zig-zag varint, so a record's
 * start depends on the previous record's length: a sequential loop, a few nanoseconds a
 * record here against a fraction of a microsecond in Python.
 *
 * Built as a plain shared library (scripts/build_native.sh) and called with ctypes; when it
 * is absent, walk.py walks in Python. Both accept exactly the same sections: `count`
 * records, none of negative length, whose lengths tile data[start:end] exactly. */

#include <stdint.h>

/* Raised whenever the signature or the meaning of the results changes, so that a library
 * left from an older source is not used (walk.py checks it). */
#define LOGLAKE_WALK_ABI 1

enum {
    WALK_OK = 0,
    WALK_NEGATIVE_LENGTH = -1,
    WALK_BAD_VARINT = -2,     /* cut by the end of the section, or longer than 10 bytes */
    WALK_PAST_END = -3,       /* a record's length runs past the end of the section */
    WALK_COUNT_MISMATCH = -4, /* more or fewer records than `count` */
};

int64_t loglake_walk_abi(void) { return LOGLAKE_WALK_ABI; }

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
        uint64_t length = value >> 1;
        if (length > (uint64_t)(end - pos)) {
            return WALK_PAST_END;
        }
        if (starts) {
            starts[found] = at;
        }
        found++;
        at = pos + (int64_t)length;
    }
    return found == count ? WALK_OK : WALK_COUNT_MISMATCH;
}
