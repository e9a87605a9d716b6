#!/usr/bin/env python3
"""The server side of ibv_{rc,ud,uc}_pingpong's TCP address exchange, with
no RDMA behind it: it tells every client that the server's QP is QPN (the
test QP `uroce node` attaches, 0xC0DE) at GID4 or GID6 (the one of the
client's family), so that an unmodified client on the kernel rxe peer
sends its RoCEv2 packets to the uroce engine.

The exchange (rdma-core libibverbs/examples/*_pingpong.c): the client sends
"LLLL:QQQQQQ:PPPPPP:<32 hex digits of the GID>" and a NUL (52 bytes), the
server answers the same way, the client sends "done" and a NUL.

    pingpong_peer.py PORT QPN GID4 GID6

GID4 and GID6 are IPv6 literals (::ffff:a.b.c.d for IPv4).  Prints
"listening" once ready, then one line per client; runs until killed.
"""
import ipaddress
import socket
import sys

MSG_LEN = len("0000:000000:000000:00000000000000000000000000000000") + 1
DONE_LEN = len("done") + 1


def recv_exact(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def main():
    port, qpn = int(sys.argv[1]), int(sys.argv[2], 0)
    gid4 = ipaddress.IPv6Address(sys.argv[3]).packed.hex()
    gid6 = ipaddress.IPv6Address(sys.argv[4]).packed.hex()
    srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    srv.bind(("::", port))
    srv.listen(8)
    print("listening", flush=True)
    while True:
        conn, addr = srv.accept()
        with conn:
            conn.settimeout(10)
            try:
                msg = recv_exact(conn, MSG_LEN)
                if len(msg) != MSG_LEN:
                    print(f"{addr[0]}: short address message ({len(msg)} bytes)", flush=True)
                    continue
                lid, cqpn, cpsn, cgid = msg.rstrip(b"\0").decode().split(":")
                # An IPv4-mapped client GID gets the IPv4 answer.
                gid = gid4 if cgid.startswith("00000000000000000000ffff") else gid6
                reply = f"0000:{qpn:06x}:000000:{gid}".encode() + b"\0"
                conn.sendall(reply)
                done = recv_exact(conn, DONE_LEN)
                print(f"client {addr[0]} qpn 0x{cqpn} psn 0x{cpsn} gid {cgid} -> qpn 0x{qpn:06x} gid {gid}"
                      f" ({'done' if done.startswith(b'done') else 'no done'})", flush=True)
            except (OSError, ValueError) as e:
                print(f"{addr[0]}: {e}", flush=True)


if __name__ == "__main__":
    main()
