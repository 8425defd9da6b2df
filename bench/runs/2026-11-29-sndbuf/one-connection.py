import socket, sys, time
mode = sys.argv[1]
if mode == "recv":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 5301)); s.listen(1)
    while True:
        c, _ = s.accept(); n = 0; t0 = time.monotonic()
        while True:
            b = c.recv(1 << 20)
            if not b: break
            n += len(b)
        dt = time.monotonic() - t0
        print(f"{n/dt/1e6:.1f} MB/s", flush=True); c.close()
else:
    sndbuf = int(sys.argv[2]); secs = float(sys.argv[3])
    c = socket.create_connection((sys.argv[4], 5301))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"bbr")
    if sndbuf: c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    print("sndbuf", c.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF), file=sys.stderr)
    buf = b"x" * (1 << 20); t0 = time.monotonic()
    while time.monotonic() - t0 < secs: c.sendall(buf)
    c.close()
