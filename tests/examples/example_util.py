"""What the example tests share: the repository's root and the reader of the plots' metadata."""
import os

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def png_description(path):
    """The JSON text of a PNG's "Description" chunk (what examples/plot.py stores there)."""
    import json
    import struct
    import zlib
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos = 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"tEXt":
            key, _, text = body.partition(b"\0")
            if key == b"Description":
                return json.loads(text.decode("latin-1"))
        elif kind == b"iTXt":
            key, _, rest = body.partition(b"\0")
            if key == b"Description":
                compressed, rest = rest[0], rest[2:]
                rest = rest.split(b"\0", 2)[2]  # language tag, translated keyword
                return json.loads((zlib.decompress(rest) if compressed else rest).decode())
    raise AssertionError("%s has no Description chunk" % path)
