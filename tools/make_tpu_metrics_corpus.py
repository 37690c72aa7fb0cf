#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/fuzz_tpu_metrics.cpp into fuzz/corpus/tpu_metrics/.

Each seed is one byte that picks the parser (0: a MetricResponse, 1: HPACK blocks, 2: one
Huffman string; fuzz_tpu_metrics.cpp) and that parser's input, built here from the protobuf
wire format and RFC 7541 by hand (no protobuf or HPACK library needed).
Usage: tools/make_tpu_metrics_corpus.py [OUT_DIR]
"""
import os
import struct
import sys


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(n, v):
    return varint(n << 3) + varint(v)


def field_bytes(n, b):
    return varint(n << 3 | 2) + varint(len(b)) + b


def field_double(n, v):
    return varint(n << 3 | 1) + struct.pack("<d", v)


def metric(device_value, gauge):
    attribute = field_bytes(1, b"device-id") + field_bytes(2, device_value)
    timestamp = field_varint(1, 1700000000)
    return field_bytes(1, attribute) + field_bytes(2, timestamp) + field_bytes(3, gauge)


def response(name, metrics):
    tpu_metric = field_bytes(1, name) + field_bytes(2, b"a seed")
    for m in metrics:
        tpu_metric += field_bytes(3, m)
    return field_bytes(1, tpu_metric)


def literal_indexed(name, value):
    """An HPACK literal with incremental indexing and a new name, strings not Huffman-coded."""
    return b"\x40" + bytes([len(name)]) + name + bytes([len(value)]) + value


def blocks(*header_blocks):
    """fuzz_tpu_metrics.cpp's HPACK input: each block after a byte of its length."""
    return b"".join(bytes([len(b)]) + b for b in header_blocks)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "fuzz", "corpus", "tpu_metrics")
    os.makedirs(out, exist_ok=True)
    seeds = {
        # HBM in use on two devices, ids as int_attr (3)
        "memory": b"\x00" + response(b"tpu.runtime.hbm.memory.usage.bytes", [
            metric(field_varint(3, 0), field_varint(2, 1 << 30)),
            metric(field_varint(3, 1), field_varint(2, 3 << 29)),
        ]),
        # duty cycle as doubles, one id as a string of digits (1), one in a kvlist_attr (6)
        "duty_cycle": b"\x00" + response(b"tpu.runtime.tensorcore.dutycycle.percent", [
            metric(field_bytes(1, b"2"), field_double(1, 37.5)),
            metric(field_bytes(6, field_bytes(1, field_bytes(1, b"device_ordinal") +
                                              field_bytes(2, field_varint(3, 3)))),
                   field_double(1, 99.0)),
        ]),
        # response headers (":status: 200" from the static table, content-type added to the
        # dynamic table), then trailers that add grpc-status and index both entries again
        "hpack": b"\x01" + blocks(
            b"\x88" + literal_indexed(b"content-type", b"application/grpc"),
            literal_indexed(b"grpc-status", b"0") + b"\xbe\xbf"),
        # RFC 7541 C.4.1's Huffman-coded "www.example.com"
        "huffman": b"\x02" + bytes.fromhex("f1e3c2e5f23a6ba0ab90f4ff"),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
