"""zen.connect through torch's TCPStore whose server process is stopped
(SIGSTOP), as rank 0 under torchrun can be (issue 41, H1): torch's check, get
and wait then block for ever, and zen.connect blocked with them. Every store
call zen makes must end within zen's timeout. Also (W1) two connects on one
torch store and prefix at the same time fail at once instead of pairing
across jobs."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch.distributed as dist

import zen


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVER = textwrap.dedent("""
    import datetime, sys, time
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 2, True,
                          timeout=datetime.timedelta(seconds=60), wait_for_workers=False)
    print("ready", flush=True)
    time.sleep(300)
""")

CLIENT = textwrap.dedent("""
    import datetime, sys, time
    import torch.distributed as dist
    import zen
    store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 2, False,
                          timeout=datetime.timedelta(seconds=60))
    print("connected", flush=True)
    sys.stdin.readline()  # the server is stopped now
    start = time.monotonic()
    try:
        zen.connect(store, 1, 2, timeout=float(sys.argv[2]))
        print("RESULT connected", flush=True)
    except Exception as e:
        print(f"RESULT {type(e).__name__} after {time.monotonic() - start:.2f} s: {e}", flush=True)
""")


def test_stopped_torch_store_server_ends_the_connect_within_the_timeout():
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE,
                              text=True)
    client = None
    try:
        assert server.stdout.readline().strip() == "ready"
        client = subprocess.Popen([sys.executable, "-c", CLIENT, str(port), "2"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        assert client.stdout.readline().strip() == "connected"
        os.kill(server.pid, signal.SIGSTOP)
        start = time.monotonic()
        client.stdin.write("go\n")
        client.stdin.flush()
        try:
            out, _ = client.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            client.kill()
            out, _ = client.communicate()
            pytest.fail(f"zen.connect still blocked 30 s after the store's server stopped: {out}")
        took = time.monotonic() - start
        result = [line for line in out.splitlines() if line.startswith("RESULT")]
        assert result and "TransportError" in result[0], out
        assert "did not answer" in result[0], out
        assert took < 2 + 5, out
        print(f"stopped torch store: {result[0]} (process ended after {took:.2f} s)")
    finally:
        for p in (client, server):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_two_connects_on_one_torch_store_and_prefix_never_pair_across():
    """Job A and job B (each of 2 ranks, on threads) share one torch store and
    the default prefix, started A0, B0, A1, B1 0.3 s apart: the rank 0s fail
    at once, pointing to ?job=ID / the prefix, and no rank connects."""
    store = dist.HashStore()
    out = {}

    def body(name, rank):
        try:
            out[name] = zen.connect(store, rank, 2, timeout=4)
        except Exception as e:
            out[name] = e

    threads = []
    for name in ["A0", "B0", "A1", "B1"]:
        t = threading.Thread(target=body, args=(name, int(name[1])))
        t.start()
        threads.append(t)
        time.sleep(0.3)
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    for name, r in out.items():
        assert isinstance(r, Exception), f"{name} connected although another job shares the store"
    for name in ["A0", "B0"]:
        assert "?job=ID" in str(out[name]) and "prefix" in str(out[name]), out[name]
