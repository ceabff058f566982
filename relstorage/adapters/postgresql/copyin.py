"""Rows sent with COPY in PostgreSQL's binary format: two round trips (the
statement, answered by the server's readiness, then the rows) whatever
their number, and the server neither parses SQL text nor decodes escaped
bytes."""
import struct


_COPY_HEADER = b'PGCOPY\n\xff\r\n\x00' + struct.pack('!ii', 0, 0)
# Each row: the field count, then (length, value) pairs up to the state's
# length; the state and blob_id follow.
_COPY_TEMP_ROW = struct.Struct('!hiqiqi')     # zoid, prev_tid
_COPY_HF_ROW = struct.Struct('!hiqiqiqi')     # zoid, tid, state_size
_COPY_HP_ROW = struct.Struct('!hiqiqiqiqi')   # zoid, tid, prev_tid, size
_COPY_BIGINT = struct.Struct('!iq')           # blob_id
_COPY_NULL = struct.pack('!i', -1)


def binary_copy(rows, tid=None, with_prev=False):
    """``[(zoid, prev_tid, state, blob_id)]`` as a binary COPY stream:
    temp_store's columns, or with *tid* object_state's (*with_prev*: the
    history-preserving one's). A NULL state has length -1, size 0."""
    if tid is None:
        pack = _COPY_TEMP_ROW.pack

        def head(zoid, prev_tid, length):
            return pack(4, 8, zoid, 8, prev_tid, length)
    elif with_prev:
        pack = _COPY_HP_ROW.pack

        def head(zoid, prev_tid, length):
            return pack(6, 8, zoid, 8, tid, 8, prev_tid, 8,
                        max(length, 0), length)
    else:
        pack = _COPY_HF_ROW.pack

        def head(zoid, prev_tid, length):
            return pack(5, 8, zoid, 8, tid, 8, max(length, 0), length)
    parts = [_COPY_HEADER]
    append = parts.append
    bigint = _COPY_BIGINT.pack
    for zoid, prev_tid, state, blob_id in rows:
        if state is None:
            append(head(zoid, prev_tid, -1))
        else:
            append(head(zoid, prev_tid, len(state)))
            append(state)
        append(_COPY_NULL if blob_id is None else bigint(8, blob_id))
    append(b'\xff\xff')
    return b''.join(parts)


def copy_in(session, sql, data):
    with session.lock, session.guarded():
        session.flush()
        # The statement, answered by the server's readiness; then the
        # rows, answered by the outcome.
        session.count_round_trip()
        session.count_round_trip(0)
        session.adapter.driver.copy_in(session.live_cursor(), sql, data)
