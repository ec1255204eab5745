"""The codec's limits: how deep values nest, how large a blob is, which integers msgpack holds.

A leaf: the packer, the checks and the explanations of a refusal all read these.
"""

#: Largest blob `loads` accepts; anything longer is refused before it is parsed.
MAX_BLOB_BYTES = 256 * 1024 * 1024

#: Deepest nesting of ext values (tuples, sets, records, enums) inside one another.
MAX_DEPTH = 100
#: The outermost ext levels are packed and unpacked by msgpack's fast C calls, whose lists and
#: dicts may nest up to msgpack's own limit (`PLAIN_LIMIT`); deeper ones are unpacked by a
#: heap-allocated `Unpacker`, and their lists and dicts may nest at most `DEEP_PLAIN_LIMIT`
#: levels, so the worst case stays a few MiB of C stack.
C_LEVELS = 4
PLAIN_LIMIT = 1024
DEEP_PLAIN_LIMIT = 32
#: Lists and dicts a checked value leaves free for where it is stored: the envelope, the
#: state, an event, and one level per container whose output holds it.
HEADROOM = 64

#: The integers msgpack encodes: int64 and uint64.
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
