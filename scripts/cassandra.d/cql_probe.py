#!/usr/bin/env python3
"""Asks a CQL node for its release version, speaking native protocol v4 on a plain socket.

scripts/cassandra uses it to tell "the port is open" from "the node answers CQL": a node that
accepts TCP but cannot yet run a query is not ready. Exit 0 and the version on stdout, or exit 1.
"""
import socket
import struct
import sys

OP_ERROR, OP_STARTUP, OP_READY, OP_QUERY, OP_RESULT = 0x00, 0x01, 0x02, 0x07, 0x08


def frame(stream, opcode, body):
    return struct.pack(">BBhBi", 0x04, 0, stream, opcode, len(body)) + body


def string_map(entries):
    out = struct.pack(">H", len(entries))
    for key, value in entries.items():
        for text in (key, value):
            raw = text.encode()
            out += struct.pack(">H", len(raw)) + raw
    return out


def read_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed by the node")
        data += chunk
    return data


def read_frame(sock):
    _version, _flags, _stream, opcode, length = struct.unpack(">BBhBi", read_exactly(sock, 9))
    return opcode, read_exactly(sock, length)


def release_version(host, port, timeout):
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(frame(1, OP_STARTUP, string_map({"CQL_VERSION": "3.0.0"})))
        opcode, body = read_frame(sock)
        if opcode != OP_READY:
            raise RuntimeError(f"STARTUP answered opcode {opcode}: {body[6:]!r}")
        query = b"SELECT release_version FROM system.local"
        # <long string query><short consistency ONE><byte flags none>
        body = struct.pack(">i", len(query)) + query + struct.pack(">HB", 0x0001, 0)
        sock.sendall(frame(2, OP_QUERY, body))
        opcode, body = read_frame(sock)
        if opcode != OP_RESULT:
            raise RuntimeError(f"QUERY answered opcode {opcode}: {body[6:]!r}")
        kind, flags, columns = struct.unpack(">iii", body[:12])
        if kind != 2 or columns != 1:
            raise RuntimeError("unexpected result shape")
        pos = 12
        if flags & 0x0001:  # global table spec: keyspace and table names
            for _ in range(2):
                (n,) = struct.unpack(">H", body[pos:pos + 2])
                pos += 2 + n
        (n,) = struct.unpack(">H", body[pos:pos + 2])  # column name
        pos += 2 + n + 2  # and its type id (varchar)
        (rows,) = struct.unpack(">i", body[pos:pos + 4])
        pos += 4
        if rows < 1:
            raise RuntimeError("system.local has no row")
        (n,) = struct.unpack(">i", body[pos:pos + 4])
        return body[pos + 4:pos + 4 + n].decode()


def main():
    host = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 9042
    try:
        print(release_version(host, port, timeout=5.0))
    except (OSError, RuntimeError, struct.error) as err:
        print(f"not ready: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
