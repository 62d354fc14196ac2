"""The baseline for bench/http_produce.py: the same server stack, parsing the same body, storing nothing.

uvicorn + uvloop + FastAPI, the body read and parsed with orjson and every record's
key and value base64-decoded in Python (strict, what the broker's Python path uses), and
an answer of the same shape as the broker's.

`bare_endpoint.py PORT floor`: the stack's floor instead, the body parsed with orjson and
nothing else, the same answer for every request (rendered once): what any endpoint on this
stack pays for a request of this size, whatever it does with the records.
"""

from __future__ import annotations

import binascii
import sys

import orjson
import uvicorn
from fastapi import FastAPI, Request, Response

from ingest_gateway.http.errors import JSONBytesResponse

app = FastAPI()


@app.post("/topics/{topic}")
async def produce(topic: str, request: Request) -> JSONBytesResponse:
    doc = orjson.loads(await request.body())
    offsets = []
    for i, r in enumerate(doc["records"]):
        binascii.a2b_base64(r["key"], strict_mode=True)
        binascii.a2b_base64(r["value"], strict_mode=True)
        offsets.append({"partition": 0, "offset": i, "error_code": None, "error": None})
    return JSONBytesResponse({"offsets": offsets})


floor = FastAPI()
_answers: dict[int, bytes] = {}


@floor.post("/topics/{topic}")
async def produce_floor(topic: str, request: Request) -> Response:
    count = len(orjson.loads(await request.body())["records"])
    if count not in _answers:
        offsets = [{"partition": 0, "offset": i, "error_code": None, "error": None} for i in range(count)]
        _answers[count] = orjson.dumps({"offsets": offsets})
    return Response(_answers[count], media_type="application/json")


@app.get("/healthz")
@floor.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


if __name__ == "__main__":
    served = floor if sys.argv[2:] == ["floor"] else app
    uvicorn.run(served, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", loop="uvloop")
