"""The baseline for bench/http_produce.py: the same server stack, parsing the same body, storing nothing.

uvicorn + uvloop + FastAPI, the body read and parsed with orjson and every record's
key and value base64-decoded (strict, the broker's decoder), as the broker does before it encodes and appends.
"""

from __future__ import annotations

import binascii
import sys

import orjson
import uvicorn
from fastapi import FastAPI, Request

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


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", loop="uvloop")
