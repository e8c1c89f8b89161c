"""Sends exactly N HTTP/1.1 POSTs of a chat request over C keep-alive
connections (each connection sends its share one after another) and checks
every answer is a 200; prints the count answered. For per-request counts
(instructions, allocations, system calls) that need a fixed number of
requests, not a fixed time.

    percall_client.py HOST:PORT N C BODY

Loopback only: bench/percall.sh passes 127.0.0.1 addresses.
"""
import asyncio
import sys


async def conn(host: str, port: int, n: int, req: bytes) -> int:
    r, w = await asyncio.open_connection(host, port)
    ok = 0
    for _ in range(n):
        w.write(req)
        await w.drain()
        head = await r.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        await r.readexactly(length)
        if head.startswith(b"HTTP/1.1 200"):
            ok += 1
    w.close()
    return ok


async def main(addr: str, n: int, c: int, body: str) -> None:
    host, _, port = addr.rpartition(":")
    data = body.encode()
    req = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode() + data
    shares = [n // c + (1 if i < n % c else 0) for i in range(c)]
    done = await asyncio.gather(*(conn(host, int(port), s, req) for s in shares))
    print(sum(done))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
