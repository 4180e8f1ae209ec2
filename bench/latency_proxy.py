"""A TCP relay on loopback that delays each direction by a fixed time, to stand in for a
far-away site (the kernel's netem is not available everywhere).

Each chunk read from one side is delivered to the other side `delay` seconds after it was
read, without holding back the chunks behind it: latency is added, bandwidth is not cut.

    with LatencyProxy({("127.0.0.1", 0): ("127.0.0.2", 2222)}, delay=0.075) as proxy:
        proxy.address_for(("127.0.0.2", 2222))  # -> ("127.0.0.1", <listening port>)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterable

Address = tuple[str, int]


class LatencyProxy:
    """Relays listen_address -> backend with `delay` seconds added each way."""

    def __init__(self, backends: Iterable[Address], delay: float, listen_host: str = "127.0.0.1"):
        self.backends = list(backends)
        self.delay = delay
        self.listen_host = listen_host
        self._addresses: dict[Address, Address] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._servers: list[asyncio.base_events.Server] = []
        self.connections = 0

    def address_for(self, backend: Address) -> Address:
        return self._addresses[backend]

    def __enter__(self) -> LatencyProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        future.result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _start(self) -> None:
        for backend in self.backends:
            server = await asyncio.start_server(
                lambda r, w, b=backend: self._relay(r, w, b), self.listen_host, 0
            )
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1]
            self._addresses[backend] = (self.listen_host, port)

    async def _stop(self) -> None:
        for server in self._servers:
            server.close()
        # Relays still open at the end of a benchmark are cut, not awaited.
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _relay(
        self,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        backend: Address,
    ) -> None:
        # Cancelled at shutdown: end quietly (asyncio logs exceptions of handler tasks).
        with contextlib.suppress(asyncio.CancelledError):
            await self._connect_and_pipe(client_reader, client_writer, backend)

    async def _connect_and_pipe(
        self,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        backend: Address,
    ) -> None:
        self.connections += 1
        # The TCP handshake to the far site also costs a round trip.
        await asyncio.sleep(2 * self.delay)
        try:
            backend_reader, backend_writer = await asyncio.open_connection(*backend)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            self._pipe(client_reader, backend_writer),
            self._pipe(backend_reader, client_writer),
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not chunk:
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                    return
                writer.write(chunk)
                with contextlib.suppress(OSError):
                    await writer.drain()

        sender = asyncio.ensure_future(deliver())
        try:
            while True:
                chunk = await reader.read(65536)
                queue.put_nowait((time.monotonic() + self.delay, chunk))
                if not chunk:
                    break
        except OSError:
            queue.put_nowait((time.monotonic() + self.delay, b""))
        await sender
        with contextlib.suppress(OSError):
            writer.close()
