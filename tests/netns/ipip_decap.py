"""Decapsulates IP-in-IP for a backend whose kernel has no `ipip` driver: receives protocol-4
packets on a raw socket and writes the inner IPv4 packet to a TUN device, so the backend's own
stack receives the client's packet as the load balancer sent it and answers the client
directly (what a Linux `ipip` tunnel device does in the kernel).

Usage: python3 ipip_decap.py TUN_NAME
"""
import fcntl
import os
import socket
import struct
import sys

TUNSETIFF, IFF_TUN, IFF_NO_PI = 0x400454CA, 0x0001, 0x1000
tun = os.open("/dev/net/tun", os.O_RDWR)
fcntl.ioctl(tun, TUNSETIFF, struct.pack("16sH", sys.argv[1].encode(), IFF_TUN | IFF_NO_PI))
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, 4)
print("ready", flush=True)
while True:
    packet = raw.recv(65535)
    ihl = (packet[0] & 0x0F) * 4
    os.write(tun, packet[ihl:])
