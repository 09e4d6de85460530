"""moto's server with create-only writes made atomic: `python -m tests.atomic_moto -H HOST -p PORT`.

moto answers `If-None-Match: *` by looking the key up and then writing it, with nothing held in
between (moto/s3/responses.py, `S3Response.put_object`): two PUTs of the same new key at the same
moment can both succeed, which S3 itself never allows. Tests that race two writers on one key run
this server, where every object PUT is handled under one lock, so they test the writers and not
that gap in the fake.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from moto import server
from moto.s3.responses import S3Response

_LOCK = threading.Lock()
_PUT = S3Response.put_object


def _put_object(self: S3Response) -> Any:
    with _LOCK:
        return _PUT(self)


def main() -> None:
    S3Response.put_object = _put_object  # type: ignore[method-assign]
    server.main(sys.argv[1:])


if __name__ == "__main__":
    main()
