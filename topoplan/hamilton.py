"""Hamiltonian decompositions of the complete graph K_n (Walecki), shared by the RailX generator (rings
along rows and columns) and the ring collectives over a directly meshed node."""

from __future__ import annotations


def walecki_odd(n: int) -> list[list[int]]:
    """(n-1)/2 edge-disjoint Hamiltonian cycles of K_n, n odd; node n-1 is the hub (Walecki)."""
    m, k = (n - 1) // 2, n - 1
    cycles = []
    for c in range(m):
        order = [c % k]
        for j in range(1, m + 1):
            order.append((c + j) % k)
            if j < m:
                order.append((c - j) % k)
        cycles.append([n - 1] + order)
    return cycles


def ring_decomposition(n: int) -> list[list[int]]:
    """The rings of a row of n nodes: node sequences whose consecutive pairs (closing the ring) are the
    links. Together they are K_n exactly. For even n the last entry is the perfect matching, as a flat
    list of pairs [a0, b0, a1, b1, ...] marked by ``is_matching``."""
    if n <= 1:
        return []
    if n == 2:
        return [[0, 1]]  # a matching of one pair
    if n % 2:
        return walecki_odd(n)
    new = n - 1
    cycles, matching, covered = [], [], set()
    for cycle in walecki_odd(n - 1):
        i = len(cycle) // 2
        x, y = cycle[i], cycle[(i + 1) % len(cycle)]
        cycles.append(cycle[:i + 1] + [new] + cycle[i + 1:])
        matching += [x, y]
        covered |= {x, y}
    (left,) = set(range(n - 1)) - covered
    matching += [new, left]
    return cycles + [matching]
