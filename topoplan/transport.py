"""Transport goodput: the share of a network link's bit rate that carries payload.

Every RDMA packet of ``mtu_bytes`` payload (the NIC's RDMA MTU, ``nics.yaml``) occupies the wire with its
headers, trailers and framing too, so a link of rate R delivers ``R * mtu / (mtu + overhead)`` of data.
The overhead per packet depends on the fabric's transport (the switches' ``transport`` field):

* ``infiniband``: LRH 8 + BTH 12 + ICRC 4 + VCRC 2 = 26 bytes (InfiniBand Architecture Specification
  Vol. 1, packet formats; no GRH inside one subnet);
* ``ethernet`` (RoCEv2): preamble and start delimiter 8 + Ethernet header 14 + IPv4 20 + UDP 8 + BTH 12 +
  ICRC 4 + FCS 4 + inter-frame gap 12 = 82 bytes (IEEE 802.3 framing, RFC 791/768, IBTA RoCEv2 annex;
  the same 82-byte breakdown is tabled at pingdo.net/ai-infrastructure/roce-v2-header-overhead);
* ``ideal``: none (textbook switches, and catalogs that do not say).

At a 4096-byte MTU that is 0.9937 (InfiniBand) and 0.9804 (RoCEv2). Left out: RDMA extended headers on
the first packet of a message (RETH 16 bytes), acknowledgements on the reverse path, congestion-control
pacing below line rate, and the 64b/66b line coding (the catalogs' port speeds are data rates).
"""

from __future__ import annotations

TRANSPORTS = ("infiniband", "ethernet", "ideal")
OVERHEAD_BYTES = {"infiniband": 26, "ethernet": 82, "ideal": 0}
DEFAULT_MTU_BYTES = 4096


def goodput(transport: str, mtu_bytes: int = DEFAULT_MTU_BYTES) -> float:
    """Payload share of the wire for full-MTU packets.

    >>> round(goodput("ethernet"), 4), round(goodput("infiniband"), 4), goodput("ideal")
    (0.9804, 0.9937, 1.0)
    """
    return mtu_bytes / (mtu_bytes + OVERHEAD_BYTES[transport])
