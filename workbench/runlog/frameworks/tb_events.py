"""TensorBoard's event file (`events.out.tfevents.*`), read for its scalars: (step, tag, value).

The file is a sequence of TFRecords (length as 8 bytes little-endian, its checksum, the record, its
checksum), each record a serialized `tensorflow.Event` protobuf (tensorboard/compat/proto/
event.proto): `step` (field 2) and `summary` (field 5), whose `value`s (field 1) each carry a
`tag` (1) and either `simple_value` (2, a float: what torch's SummaryWriter.add_scalar writes) or
a scalar `tensor` (8: TensorProto's float_val 5, double_val 6, int_val 7, int64_val 10 or its raw
tensor_content 4 with dtype 1; what TensorFlow 2's tf.summary.scalar writes). Other events
(file version, graphs, histograms, images, text) are passed over. A file that is not such records,
or cut inside one, is refused naming the byte where it stopped making sense.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pandas as pd

from workbench.contracts.schema import ConfigError

_FIX = "a TensorBoard event file (events.out.tfevents.*) as a SummaryWriter writes it"
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64 = 1, 2, 3, 9


class _Bad(Exception):
    pass


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise _Bad("a varint runs past its message")
        b = buf[i]
        out |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return out, i
        shift += 7


def _fields(buf: bytes):
    """(field number, wire type, value) of a protobuf message: ints for varints, bytes else."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt in (1, 5):
            n = 8 if wt == 1 else 4
            v, i = buf[i:i + n], i + n
        elif wt == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            raise _Bad(f"wire type {wt}")
        if i > len(buf):
            raise _Bad("a field runs past its message")
        yield num, wt, v


def _tensor_scalar(buf: bytes) -> float | None:
    dtype, content = DT_FLOAT, b""
    for num, wt, v in _fields(buf):
        if num == 1 and wt == 0:
            dtype = v
        elif num == 4 and wt == 2:
            content = v
        elif num in (5, 6) and v:
            fmt, size = ("<f", 4) if num == 5 else ("<d", 8)
            return struct.unpack(fmt, v[:size])[0]
        elif num in (7, 10) and wt == 0:
            return float(v - (1 << 64) if v >= 1 << 63 else v)
    fmts = {DT_FLOAT: "<f", DT_DOUBLE: "<d", DT_INT32: "<i", DT_INT64: "<q"}
    if dtype in fmts and len(content) == struct.calcsize(fmts[dtype]):
        return float(struct.unpack(fmts[dtype], content)[0])
    return None


def _scalars(event: bytes) -> list[tuple[int, str, float]]:
    step, summary = 0, None
    for num, wt, v in _fields(event):
        if num == 2 and wt == 0:
            step = v - (1 << 64) if v >= 1 << 63 else v
        elif num == 5 and wt == 2:
            summary = v
    out = []
    for num, wt, value in _fields(summary or b""):
        if num != 1 or wt != 2:
            continue
        tag, x = "", None
        for f, fwt, v in _fields(value):
            if f == 1 and fwt == 2:
                tag = v.decode("utf-8", "replace")
            elif f == 2 and fwt == 5:
                x = struct.unpack("<f", v)[0]
            elif f == 8 and fwt == 2:
                x = _tensor_scalar(v)
        if tag and x is not None:
            out.append((step, tag, float(x)))
    return out


def read_events(path: str | Path) -> pd.DataFrame:
    """The scalars as a long table (step, tag, value), in the file's order."""
    p = Path(path)
    buf = p.read_bytes()
    rows, i = [], 0
    while i < len(buf):
        if i + 12 > len(buf):
            raise ConfigError(f"{p} (byte {i})", "<record>", "cut inside a record's header", _FIX)
        (n,) = struct.unpack("<Q", buf[i:i + 8])
        start, end = i + 12, i + 12 + n
        if end + 4 > len(buf):
            raise ConfigError(f"{p} (byte {i})", "<record>",
                              f"a record of {n:,} bytes that the file does not hold", _FIX)
        try:
            rows += _scalars(buf[start:end])
        except (_Bad, struct.error, UnicodeDecodeError) as exc:
            raise ConfigError(f"{p} (byte {start})", "<event>", f"not an Event ({exc})",
                              _FIX) from None
        i = end + 4
    if not rows:
        raise ConfigError(str(p), "<scalars>", "no scalar in the file", _FIX)
    return pd.DataFrame(rows, columns=["step", "tag", "value"])
