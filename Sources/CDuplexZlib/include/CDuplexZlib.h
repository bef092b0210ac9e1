#ifndef C_DUPLEX_ZLIB_H
#define C_DUPLEX_ZLIB_H

// zlib for the server's event-loop permessage-deflate: deflateInit2 and inflateInit2 are macros
// in zlib.h, so they are wrapped here; everything else is called as zlib declares it.
#include <zlib.h>

static inline int CDuplexZlib_deflateInit2(z_streamp stream, int level, int windowBits, int memLevel) {
    return deflateInit2(stream, level, Z_DEFLATED, windowBits, memLevel, Z_DEFAULT_STRATEGY);
}

static inline int CDuplexZlib_inflateInit2(z_streamp stream, int windowBits) {
    return inflateInit2(stream, windowBits);
}

#endif
